#include "core/nn/losses.hpp"

#include <cmath>
#include <string>

namespace troupe::core {

Expected<float> SoftmaxCrossEntropy::forward(ConstTensorView logits, const int32_t* labels) {
  TROUPE_ASSERT(logits.shape().rank() == 2, "SoftmaxCrossEntropy: logits must be [batch, classes]");
  const int64_t n = logits.shape()[0], c = logits.shape()[1];
  for (int64_t i = 0; i < n; ++i)
    if (labels[i] < 0 || labels[i] >= c)
      return make_error(Errc::out_of_range, "label " + std::to_string(labels[i]) + " of example " +
                                                std::to_string(i) + " outside [0, " +
                                                std::to_string(c) + ")");
  probs_.resize(logits.shape());
  grad_.resize(logits.shape());
  auto p = probs_.matrix();
  const auto z = logits.matrix();
  p = (z.colwise() - z.rowwise().maxCoeff()).array().exp().matrix();
  const Eigen::VectorXf sums = p.rowwise().sum();
  double loss = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    p.row(i) /= sums[i];
    loss -= std::log(std::max(p(i, labels[i]), 1e-30f));
  }
  const float inv_n = n > 0 ? 1.0f / static_cast<float>(n) : 0.0f;
  auto g = grad_.matrix();
  g = p * inv_n;
  for (int64_t i = 0; i < n; ++i)
    g(i, labels[i]) -= inv_n;
  return n > 0 ? static_cast<float>(loss / static_cast<double>(n)) : 0.0f;
}

Expected<float> SigmoidBinaryCrossEntropy::forward(ConstTensorView logits, const float* labels) {
  const int64_t n = logits.shape().rank() == 0 ? 1 : logits.shape()[0];
  TROUPE_ASSERT(logits.size() == n,
                "SigmoidBinaryCrossEntropy: logits must be [batch] or [batch, 1]");
  grad_.resize(logits.shape());
  double loss = 0.0;
  const float inv_n = n > 0 ? 1.0f / static_cast<float>(n) : 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float z = logits[i], y = labels[i];
    if (!(y >= 0.0f && y <= 1.0f))
      return make_error(Errc::out_of_range, "label " + std::to_string(y) + " of example " +
                                                std::to_string(i) + " outside [0, 1]");
    // max(z, 0) - z*y + log(1 + exp(-|z|)): never overflows.
    loss += std::max(z, 0.0f) - z * y + std::log1p(std::exp(-std::fabs(z)));
    grad_[i] = (1.0f / (1.0f + std::exp(-z)) - y) * inv_n;
  }
  return n > 0 ? static_cast<float>(loss / static_cast<double>(n)) : 0.0f;
}

}  // namespace troupe::core
