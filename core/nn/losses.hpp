#pragma once

#include <cstdint>
#include <vector>

#include "core/expected.hpp"
#include "core/tensor.hpp"

namespace troupe::core {

/// Softmax cross-entropy from logits [batch, classes] and integer labels, averaged over the
/// batch (Keras' SparseCategoricalCrossentropy(from_logits=True)).
class SoftmaxCrossEntropy {
 public:
  /// The mean loss; a label outside [0, classes) is an out_of_range error.
  Expected<float> forward(ConstTensorView logits, const int32_t* labels);
  /// d(mean loss)/d(logits) of the last forward.
  ConstTensorView backward() const { return grad_; }
  /// Class probabilities of the last forward.
  ConstTensorView probabilities() const { return probs_; }

 private:
  Tensor probs_, grad_;
};

/// Sigmoid binary cross-entropy from logits [batch] or [batch, 1] and labels in [0, 1],
/// averaged over the batch; computed in the overflow-free form.
class SigmoidBinaryCrossEntropy {
 public:
  Expected<float> forward(ConstTensorView logits, const float* labels);
  ConstTensorView backward() const { return grad_; }

 private:
  Tensor grad_;
};

}  // namespace troupe::core
