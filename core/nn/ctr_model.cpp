#include "core/nn/ctr_model.hpp"

#include <algorithm>
#include <numeric>
#include <utility>
#include <vector>

namespace troupe::core {

Expected<CtrKind> parse_ctr_kind(const std::string& name) {
  if (name == "lr" || name == "logistic") return CtrKind::logistic;
  if (name == "fm") return CtrKind::fm;
  if (name == "deepfm") return CtrKind::deepfm;
  if (name == "wide_deep") return CtrKind::wide_deep;
  return make_error(Errc::invalid_argument,
                    "unknown CTR model '" + name.substr(0, 32) + "' (lr, fm, deepfm or wide_deep)");
}

const char* ctr_kind_name(CtrKind kind) {
  switch (kind) {
    case CtrKind::logistic:
      return "lr";
    case CtrKind::fm:
      return "fm";
    case CtrKind::deepfm:
      return "deepfm";
    case CtrKind::wide_deep:
      return "wide_deep";
  }
  return "?";
}

std::vector<std::pair<std::string, Shape>> ctr_dense_variables(const CtrModelConfig& c) {
  std::vector<std::pair<std::string, Shape>> v{{"bias", Shape{1}}};
  if (c.dense > 0) v.emplace_back("dense_w", Shape{c.dense, 1});
  if (c.has_dnn()) {
    std::vector<int64_t> widths = c.hidden;
    widths.push_back(1);
    int64_t in = c.fields * c.dim + c.dense;
    for (size_t i = 0; i < widths.size(); ++i) {
      const std::string layer = "dnn/dense_" + std::to_string(i);
      v.emplace_back(layer + "/kernel", Shape{in, widths[i]});
      v.emplace_back(layer + "/bias", Shape{widths[i]});
      in = widths[i];
    }
  }
  return v;
}

}  // namespace troupe::core
