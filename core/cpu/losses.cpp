// The CPU's losses and the metrics that read logits.
#include <algorithm>
#include <cmath>

#include "core/cpu/cpu_backend.hpp"

namespace troupe::core {

double CpuBackend::softmax_cross_entropy(ConstTensorView logits, ConstTensorView labels,
                                         TensorView probs, TensorView grad, float grad_scale) {
  const int64_t n = logits.shape()[0];
  const int32_t* y = labels.data_as<int32_t>();
  auto p = probs.matrix();
  const auto z = logits.matrix();
  const Eigen::VectorXf maxes = z.rowwise().maxCoeff();
  p = (z.colwise() - maxes).array().exp().matrix();
  const Eigen::VectorXf sums = p.rowwise().sum();
  double loss = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    p.row(i) /= sums[i];
    // -log_softmax, as Keras computes it: exact where the probability underflows.
    loss -= (z(i, y[i]) - maxes[i]) - std::log(sums[i]);
  }
  const float inv_n = n > 0 ? 1.0f / static_cast<float>(n) : 0.0f;
  auto g = grad.matrix();
  g = p * (inv_n * grad_scale);
  for (int64_t i = 0; i < n; ++i)
    g(i, y[i]) -= inv_n * grad_scale;
  return n > 0 ? loss / static_cast<double>(n) : 0.0;
}

double CpuBackend::sigmoid_cross_entropy(ConstTensorView logits, ConstTensorView labels,
                                         TensorView grad, float grad_scale) {
  const int64_t n = logits.size();
  const float* y = labels.data();
  double loss = 0.0;
  const float inv_n = n > 0 ? grad_scale / static_cast<float>(n) : 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float z = logits[i];
    // max(z, 0) - z*y + log(1 + exp(-|z|)): never overflows.
    loss += std::max(z, 0.0f) - z * y[i] + std::log1p(std::exp(-std::fabs(z)));
    grad[i] = (1.0f / (1.0f + std::exp(-z)) - y[i]) * inv_n;
  }
  return n > 0 ? loss / static_cast<double>(n) : 0.0;
}

int64_t CpuBackend::count_correct(ConstTensorView logits, ConstTensorView labels) {
  const auto z = logits.matrix();
  const int32_t* y = labels.data_as<int32_t>();
  int64_t correct = 0;
  for (Eigen::Index i = 0; i < z.rows(); ++i) {
    Eigen::Index arg = 0;
    z.row(i).maxCoeff(&arg);
    correct += static_cast<int32_t>(arg) == y[i];
  }
  return correct;
}

int64_t CpuBackend::binary_metrics(ConstTensorView logits, ConstTensorView labels,
                                   std::vector<int64_t>& pos, std::vector<int64_t>& neg) {
  const auto buckets = static_cast<int64_t>(pos.size());
  int64_t correct = 0;
  for (int64_t i = 0; i < logits.size(); ++i) {
    const float p = 1.0f / (1.0f + std::exp(-logits[i]));
    const bool positive = labels[i] > 0.5f;
    correct += (p > 0.5f) == positive;
    const int64_t b =
        std::clamp<int64_t>(static_cast<int64_t>(p * static_cast<float>(buckets)), 0, buckets - 1);
    ++(positive ? pos : neg)[static_cast<size_t>(b)];
  }
  return correct;
}

}  // namespace troupe::core
