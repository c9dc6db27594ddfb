#pragma once

#include <cstdint>
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
};

}  // namespace troupe::core
