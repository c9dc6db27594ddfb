#include "core/nn/losses.hpp"

#include <string>

#include "core/backend.hpp"

namespace troupe::core {

namespace {

Tensor& place(Tensor& t, const Shape& shape, Device device) {
  if (t.device() != device)
    t = Tensor(shape, DType::float32, device);
  else
    t.resize(shape);
  return t;
}

}  // namespace

Expected<float> SoftmaxCrossEntropy::forward(ConstTensorView logits, const int32_t* labels) {
  TROUPE_ASSERT(logits.shape().rank() == 2, "SoftmaxCrossEntropy: logits must be [batch, classes]");
  const int64_t n = logits.shape()[0], c = logits.shape()[1];
  for (int64_t i = 0; i < n; ++i)
    if (labels[i] < 0 || labels[i] >= c)
      return make_error(Errc::out_of_range, "label " + std::to_string(labels[i]) + " of example " +
                                                std::to_string(i) + " outside [0, " +
                                                std::to_string(c) + ")");
  const Device d = logits.device();
  place(probs_, logits.shape(), d);
  place(grad_, logits.shape(), d);
  last_labels_ = on(d, ConstTensorView(labels, Shape{n}, Device::cpu(), DType::int32), labels_);
  auto backend = backend_for(d);
  if (!backend) return backend.error();
  return static_cast<float>(
      (*backend)->softmax_cross_entropy(logits, last_labels_, probs_, grad_, grad_scale_));
}

Expected<float> SigmoidBinaryCrossEntropy::forward(ConstTensorView logits, const float* labels) {
  const int64_t n = logits.shape().rank() == 0 ? 1 : logits.shape()[0];
  TROUPE_ASSERT(logits.size() == n,
                "SigmoidBinaryCrossEntropy: logits must be [batch] or [batch, 1]");
  for (int64_t i = 0; i < n; ++i)
    if (!(labels[i] >= 0.0f && labels[i] <= 1.0f))
      return make_error(Errc::out_of_range, "label " + std::to_string(labels[i]) + " of example " +
                                                std::to_string(i) + " outside [0, 1]");
  const Device d = logits.device();
  place(grad_, logits.shape(), d);
  last_labels_ = on(d, ConstTensorView(labels, Shape{n}), labels_);
  auto backend = backend_for(d);
  if (!backend) return backend.error();
  return static_cast<float>(
      (*backend)->sigmoid_cross_entropy(logits, last_labels_, grad_, grad_scale_));
}

}  // namespace troupe::core
