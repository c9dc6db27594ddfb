#pragma once

#include <functional>
#include <vector>

#include "core/expected.hpp"
#include "core/nn/layer.hpp"

namespace troupe::core {

/// What a ClassifierTrainer trains: features [batch, ...] to logits [batch, classes], with
/// a backward pass that leaves each parameter's gradient and says as soon as each is final.
/// core::Sequential is one (layers in order, each with its own backward pass); the
/// built-in models' Keras forms are another (core::keras::ClassifierGraph, a layer graph).
class Classifier {
 public:
  virtual ~Classifier() = default;
  /// Whether forward() can take features of `shape`; an error names what differs.
  virtual Status check_input(const Shape& shape) const = 0;
  /// The logits of `x` (on the model's device); valid until the next forward.
  virtual ConstTensorView forward(ConstTensorView x) = 0;
  /// Back-propagates dy (d(loss)/d(logits) of the last forward), leaving every
  /// parameter's gradient in Parameter::grad; with `gradient_done`, calls
  /// gradient_done(i) as soon as parameters()[i]'s is final, every parameter once, in an
  /// order that is the same every step (a data-parallel step reduces the late layers'
  /// gradients while the earlier ones are computed).
  virtual void backward_parameters(ConstTensorView dy,
                                   const std::function<void(size_t)>& gradient_done) = 0;
  /// The order backward_parameters reports gradients final in, every step (indices into
  /// parameters()): a replica that has no batch to step on reports its zeros in it.
  virtual std::vector<size_t> gradient_order() = 0;
  /// Every parameter, named, its value and its gradient allocated (of its shape, on the
  /// model's device) before any backward pass, each at one address for the model's
  /// lifetime but for to(), which moves them.
  virtual std::vector<Parameter> parameters() = 0;
  /// Moves the model to `device`, computing there in `precision`; a device no backend
  /// serves is an error naming it, and nothing moves.
  virtual Status to(Device device, Precision precision = Precision::float32) = 0;
  virtual Device device() const = 0;
  virtual Precision precision() const = 0;
};

}  // namespace troupe::core
