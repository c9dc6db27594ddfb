#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "core/expected.hpp"
#include "core/keras/classifier_graph.hpp"
#include "core/loss_scale.hpp"
#include "core/metrics.hpp"
#include "core/nn/losses.hpp"
#include "core/optimizer.hpp"

namespace troupe::core::keras {

/// One process's training step for a classifier: forward, softmax cross-entropy, backward,
/// and the optimizer's update of every parameter (slots kept here, one set per parameter).
/// It runs where the model is (ClassifierGraph::to) in the model's precision: batches from the
/// host are copied to the device, and under mixed_float16 the loss is scaled dynamically
/// (core/loss_scale.hpp; a step with non-finite gradients is skipped, not applied).
///
///   model->to(Device::cuda(0), Precision::mixed_bfloat16);   // optional
///   ClassifierTrainer t(*model, sgd);
///   float loss = t.train_step(batch.features, batch.classes.data()).value();
class ClassifierTrainer {
 public:
  ClassifierTrainer(ClassifierGraph& model, Optimizer& optimizer, LossScaleOptions loss_scale = {});

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
  /// Applies the gradients. Under loss scaling, gradients that are not all finite are not
  /// applied: the step counts as skipped and the scale is halved (not an error).
  Status apply_gradients();
  /// Adds the batch to `accuracy` and its mean loss (weighted by batch size) to `loss`.
  Status evaluate_batch(ConstTensorView x, const int32_t* labels, Accuracy& accuracy, Mean& loss);

  std::vector<Parameter>& parameters() { return params_; }
  std::vector<SlotSet>& slots() { return slots_; }
  /// Under mixed_float16: the dynamic loss scale; otherwise null.
  const LossScale* loss_scale() const { return scaling_ ? &loss_scale_ : nullptr; }
  ClassifierGraph& model() { return model_; }

 private:
  /// `x` on the model's device (copied there from elsewhere).
  ConstTensorView on_model_device(ConstTensorView x);
  /// After a loss that is not finite on a device: the device's own error, if it has one.
  Status device_status(float loss);

  ClassifierGraph& model_;
  Optimizer& optimizer_;
  SoftmaxCrossEntropy loss_;
  std::vector<Parameter> params_;
  std::vector<SlotSet> slots_;
  bool scaling_ = false;
  LossScale loss_scale_;
  Tensor input_;  // the batch on the model's device
};

}  // namespace troupe::core::keras
