#pragma once

// Click-through-rate models over F categorical fields (one id per field and example, with
// a value that scales it) and D dense features:
//
//   logistic   logit = b + sum_f w[id_f] x_f + u . dense
//   fm         + 1/2 sum_k ((sum_f e_fk)^2 - sum_f e_fk^2),   e_f = v[id_f] x_f
//   deepfm     + MLP(concat(e_1 .. e_F, dense))               (Guo et al. 2017)
//   wide_deep  logistic + MLP, no FM term
//
// w and v live in one table of rows [1 + k] (column 0 is w, columns 1..k are v), so a
// worker gathers each row it needs once; b, u and the MLP are dense variables
// (ctr_dense_variables). The model is computed as its Keras form's layer graph
// (core/keras/ctr_graph.hpp, core/keras/builtin_models.hpp): no backend has a kernel of
// its own for it.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/expected.hpp"
#include "core/tensor.hpp"
#include "core/unique_ids.hpp"

namespace troupe::core {

enum class CtrKind { logistic, fm, deepfm, wide_deep };

/// "lr"/"logistic", "fm", "deepfm", "wide_deep"; anything else is an invalid_argument error.
Expected<CtrKind> parse_ctr_kind(const std::string& name);
const char* ctr_kind_name(CtrKind kind);

struct CtrModelConfig {
  CtrKind kind = CtrKind::deepfm;
  int64_t fields = 26;  // ids per example
  int64_t dense = 13;   // dense features per example
  int64_t dim = 16;     // embedding width k (unused by logistic)
  std::vector<int64_t> hidden = {400, 400, 400};
  uint64_t seed = 1;

  /// Width of a table row: 1 (logistic) or 1 + dim.
  int64_t row_width() const { return kind == CtrKind::logistic ? 1 : 1 + dim; }
  bool has_fm() const { return kind == CtrKind::fm || kind == CtrKind::deepfm; }
  bool has_dnn() const { return kind == CtrKind::deepfm || kind == CtrKind::wide_deep; }
};

/// The dense variables of `config`'s model, in the order programs store and push them:
/// "bias" [1], "dense_w" [dense, 1] (when dense > 0), then the MLP's (deepfm, wide_deep)
/// "dnn/dense_N/kernel" [in, out] and "dnn/dense_N/bias" [out], from fields x dim + dense
/// inputs through the hidden widths to 1. The table is not among them.
std::vector<std::pair<std::string, Shape>> ctr_dense_variables(const CtrModelConfig& config);

}  // namespace troupe::core
