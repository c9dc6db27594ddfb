#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "core/expected.hpp"
#include "core/metrics.hpp"
#include "core/nn/losses.hpp"
#include "core/nn/sequential.hpp"
#include "core/optimizer.hpp"

namespace troupe::core {

/// One process's training step for a classifier: forward, softmax cross-entropy, backward,
/// and the optimizer's update of every parameter (slots kept here, one set per parameter).
///
///   ClassifierTrainer t(*model, sgd);
///   float loss = t.train_step(batch.features, batch.classes.data()).value();
class ClassifierTrainer {
 public:
  ClassifierTrainer(Sequential& model, Optimizer& optimizer);

  /// The batch's mean loss before the update.
  Expected<float> train_step(ConstTensorView x, const int32_t* labels);
  /// train_step in two halves, for synchronous training, where the gradients are
  /// all-reduced in between: forward and backward (gradients in parameters()[i].grad; the
  /// batch's mean loss returned), then the optimizer's update from those gradients.
  Expected<float> compute_gradients(ConstTensorView x, const int32_t* labels);
  /// As above, calling `gradient_done(i)` as soon as parameters()[i].grad is final (the
  /// last layer's first), for reducing gradients while the backward pass goes on.
  Expected<float> compute_gradients(ConstTensorView x, const int32_t* labels,
                                    const std::function<void(size_t)>& gradient_done);
  Status apply_gradients();
  /// Adds the batch to `accuracy` and its mean loss (weighted by batch size) to `loss`.
  Status evaluate_batch(ConstTensorView x, const int32_t* labels, Accuracy& accuracy, Mean& loss);

  std::vector<Parameter>& parameters() { return params_; }
  std::vector<SlotSet>& slots() { return slots_; }

 private:
  Sequential& model_;
  Optimizer& optimizer_;
  SoftmaxCrossEntropy loss_;
  std::vector<Parameter> params_;
  std::vector<SlotSet> slots_;
  std::vector<size_t> first_param_;  // per layer: the index of its first parameter in params_
};

}  // namespace troupe::core
