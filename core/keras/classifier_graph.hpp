#pragma once

// Troupe's built-in Fashion-MNIST classifiers (the MLP, the tutorial CNN) as their Keras
// form's layer graph (builtin_models.hpp's ClassifierForm with `features`): the programs'
// features [batch, 784] in, logits out, the parameters by their graph paths
// ("dense_0/kernel"), their initial values the form's Keras initializers (Glorot-uniform
// kernels seeded from form.seed, zero biases). What a ClassifierTrainer trains: the custom
// training loops of fmnist_local, fmnist_mirrored and fmnist_ps.
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
#include "core/parameter.hpp"

namespace troupe::core::keras {

class ClassifierGraph {
 public:
  /// The classifier of `form` (form.features is implied). An MLP's features are its first
  /// width wide (784 for Fashion-MNIST).
  static Expected<std::unique_ptr<ClassifierGraph>> make(ClassifierForm form);

  /// Whether forward() can take features of `shape`; an error names what differs.
  Status check_input(const Shape& shape) const;
  /// The logits of `x` (on the model's device); valid until the next forward. In training
  /// mode: the built-in classifiers have no layer that computes otherwise out of training
  /// (Dropout, BatchNormalization).
  ConstTensorView forward(ConstTensorView x);
  /// Back-propagates dy (d(loss)/d(logits) of the last forward), leaving every
  /// parameter's gradient in Parameter::grad; with `gradient_done`, calls
  /// gradient_done(i) as soon as parameters()[i]'s is final, every parameter once, in
  /// gradient_order() (a data-parallel step reduces the late layers' gradients while the
  /// earlier ones are computed).
  void backward_parameters(ConstTensorView dy, const std::function<void(size_t)>& gradient_done);
  /// The order backward_parameters reports gradients final in, every step (indices into
  /// parameters()): a replica that has no batch to step on reports its zeros in it.
  std::vector<size_t> gradient_order() { return graph().gradient_order(); }
  /// Every parameter, named, its value and its gradient allocated (of its shape, on the
  /// model's device), each at one address for the model's lifetime but for to(), which
  /// moves them.
  std::vector<Parameter> parameters() { return params_; }
  /// Moves the model to `device`, computing there in `precision`; a device no backend
  /// serves is an error naming it, and nothing moves.
  Status to(Device device, Precision precision = Precision::float32);
  Device device() const { return graph().device(); }
  Precision precision() const { return graph().precision(); }

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

/// "mlp" (784-128-10), "cnn" (the tutorial's) or "deep_mlp" (784-1024-1024-1024-10),
/// seeded `seed`, as a ClassifierGraph; another name is an invalid_argument error.
Expected<std::unique_ptr<ClassifierGraph>> make_classifier(const std::string& name, uint64_t seed);

}  // namespace troupe::core::keras
