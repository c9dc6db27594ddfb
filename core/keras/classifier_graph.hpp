#pragma once

// Troupe's built-in Fashion-MNIST classifiers (the MLP, the tutorial CNN) trained as their
// Keras form's layer graph (builtin_models.hpp's ClassifierForm with `features`): the
// programs' features [batch, 784] in, logits out, the parameters under the hand-wired
// models' names (checkpoints and the chief's variables unchanged). What fmnist_local and
// fmnist_mirrored train.
//
//   auto model = ClassifierGraph::make(form).value();
//   ClassifierTrainer trainer(*model, sgd);
//
// One thread at a time.

#include <functional>
#include <memory>
#include <vector>

#include "core/expected.hpp"
#include "core/keras/builtin_models.hpp"
#include "core/keras/keras_model.hpp"
#include "core/nn/classifier.hpp"

namespace troupe::core::keras {

class ClassifierGraph final : public Classifier {
 public:
  /// The classifier of `form` (form.features is implied), its initial values those
  /// core::make_mlp / make_cnn give for form.seed, by name. An MLP's features are its
  /// first width wide (784 for Fashion-MNIST).
  static Expected<std::unique_ptr<ClassifierGraph>> make(ClassifierForm form);

  Status check_input(const Shape& shape) const override;
  /// In training mode, as Sequential's: the built-in classifiers have no layer that
  /// computes otherwise out of training (Dropout, BatchNormalization).
  ConstTensorView forward(ConstTensorView x) override;
  void backward_parameters(ConstTensorView dy,
                           const std::function<void(size_t)>& gradient_done) override;
  std::vector<size_t> gradient_order() override { return graph().gradient_order(); }
  std::vector<Parameter> parameters() override { return params_; }
  Status to(Device device, Precision precision = Precision::float32) override;
  Device device() const override { return graph().device(); }
  Precision precision() const override { return graph().precision(); }

  graph::Graph& graph() { return *model_.graph; }
  const graph::Graph& graph() const { return *model_.graph; }

 private:
  explicit ClassifierGraph(keras::KerasModel model);
  // Every gradient allocated where the model computes, of its weight's shape: a
  // data-parallel step gives their addresses to its all-reduce before the first backward
  // pass (the layers keep an allocation of the right shape).
  void allocate_gradients();

  keras::KerasModel model_;
  std::vector<Parameter> params_;  // the graph's weights, in order
  int64_t per_example_ = 0;
  uint64_t steps_ = 0;
};

/// "mlp" (784-128-10), "cnn" (the tutorial's) or "deep_mlp" (784-1024-1024-1024-10) as
/// core::make_model names them, seeded `seed`, as a ClassifierGraph.
Expected<std::unique_ptr<ClassifierGraph>> make_classifier(const std::string& name, uint64_t seed);

}  // namespace troupe::core::keras
