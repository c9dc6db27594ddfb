#pragma once

#include <cstdint>
#include <vector>

#include "core/expected.hpp"
#include "core/tensor.hpp"

namespace troupe::core {

/// Softmax cross-entropy from logits [batch, classes] and integer labels, averaged over the
/// batch (Keras' SparseCategoricalCrossentropy(from_logits=True)). Computed on the logits'
/// device; the labels come from the host, are checked there and copied over.
class SoftmaxCrossEntropy {
 public:
  /// The mean loss; a label outside [0, classes) is an out_of_range error.
  Expected<float> forward(ConstTensorView logits, const int32_t* labels);
  /// d(mean loss)/d(logits) of the last forward, times the gradient scale.
  ConstTensorView backward() const { return grad_; }
  /// Class probabilities of the last forward.
  ConstTensorView probabilities() const { return probs_; }
  /// The last forward's labels, on the logits' device (int32).
  ConstTensorView labels() const { return last_labels_; }
  /// Multiplies the gradient backward() gives (a loss scale; 1 by default).
  void set_grad_scale(float scale) { grad_scale_ = scale; }

 private:
  Tensor probs_, grad_, labels_;
  ConstTensorView last_labels_;
  float grad_scale_ = 1.0f;
};

/// Sigmoid binary cross-entropy from logits [batch] or [batch, 1] and labels in [0, 1],
/// averaged over the batch; computed in the overflow-free form, on the logits' device.
class SigmoidBinaryCrossEntropy {
 public:
  Expected<float> forward(ConstTensorView logits, const float* labels);
  ConstTensorView backward() const { return grad_; }
  /// The last forward's labels, on the logits' device (float32).
  ConstTensorView labels() const { return last_labels_; }
  void set_grad_scale(float scale) { grad_scale_ = scale; }

 private:
  Tensor grad_, labels_;
  ConstTensorView last_labels_;
  float grad_scale_ = 1.0f;
};

}  // namespace troupe::core
