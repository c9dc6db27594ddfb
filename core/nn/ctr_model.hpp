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
// worker gathers each row it needs once. The model never sees the table: the caller hands
// it the unique rows of the batch (from the parameter servers) and takes back their
// gradients, ready to push. Dense parameters (b, u, the MLP) are ordinary Parameters.
// The model computes on one device (to()): the rows it is given must be there; the
// batch's ids, values and dense features are copied there from the host.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/backend.hpp"
#include "core/data/example.hpp"
#include "core/nn/layer.hpp"
#include "core/nn/sequential.hpp"

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

/// The unique ids of `ids`, ascending, and for each id the index of its row among them.
void unique_ids(const std::vector<int64_t>& ids, std::vector<int64_t>& unique,
                std::vector<int32_t>& index);
/// The same over the `n` ids at `ids`.
void unique_ids(const int64_t* ids, size_t n, std::vector<int64_t>& unique,
                std::vector<int32_t>& index);

class CtrModel {
 public:
  explicit CtrModel(CtrModelConfig config);
  CtrModel(const CtrModel&) = delete;
  CtrModel& operator=(const CtrModel&) = delete;

  const CtrModelConfig& config() const { return config_; }
  /// The dense parameters: "bias" [1], "dense_w" [dense, 1] (when dense > 0), and the MLP's
  /// "dnn/dense_N/kernel|bias"; stable for the model's lifetime.
  std::vector<Parameter> parameters();

  /// Whether a batch fits: `fields` ids per example, `dense` dense features. An error names
  /// the example and what it has.
  Status check_batch(const Batch& batch) const;

  /// Logits [n, 1]. `rows` holds the table rows of the batch's unique ids ([u, row_width])
  /// and `index` maps each of the batch's n * fields ids to its row (as unique_ids gives).
  /// The views must stay valid until backward().
  Expected<ConstTensorView> forward(const Batch& batch, ConstTensorView rows,
                                    const std::vector<int32_t>& index);
  /// Back-propagates d(loss)/d(logits): the dense parameters' gradients, and row_grads()
  /// ([u, row_width], one per row given to forward).
  void backward(ConstTensorView dlogits);
  const Tensor& row_grads() const { return row_grads_; }
  Tensor& row_grads() { return row_grads_; }  // unscaled in place under loss scaling

  /// Moves the dense parameters to `device` and computes there in `precision` (the MLP's
  /// matrix products; the embedding part is float32). Errors name an unservable device.
  Status to(Device device, Precision precision = Precision::float32);
  Device device() const { return device_; }

 private:
  Tensor& place(Tensor& t, const Shape& shape);

  CtrModelConfig config_;
  Tensor bias_, dbias_, dense_w_, ddense_w_;
  std::unique_ptr<Sequential> dnn_;
  Device device_;
  Backend* backend_ = &cpu_backend();
  // The last forward's inputs (on the device) and intermediates.
  CtrArgs args_;
  bool forwarded_ = false;
  Tensor values_, index_, features_;
  Tensor dnn_in_;  // [n, fields * dim + dense]: e_f = v[id_f] x_f, then the dense features
  Tensor sum_;     // [n, dim]: sum_f e_f
  Tensor logits_;
  Tensor row_grads_;
  Tensor demb_;
};

}  // namespace troupe::core
