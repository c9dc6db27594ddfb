#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/backend.hpp"
#include "core/expected.hpp"
#include "core/tensor.hpp"

namespace troupe::core {

/// A trainable tensor of a layer and the gradient its last backward pass computed.
struct Parameter {
  std::string name;
  Tensor* value = nullptr;
  Tensor* grad = nullptr;
};

/// Sets params[i] from values[i] (pulled from parameter servers, read from a checkpoint):
/// moved in on the CPU, copied to the parameter's device otherwise. A shape that differs
/// is an invalid_argument error naming the parameter, and nothing is set.
Status assign(const std::vector<Parameter>& params, std::vector<Tensor> values);

/// A layer with an explicit backward pass. `forward` returns a view into the layer's own
/// buffer (or, for reshapes, into its input) that stays valid until the next forward; the
/// input view must stay valid until `backward`, which overwrites the parameter gradients and
/// returns the gradient with respect to the input (an empty view when `input_grad()` is off,
/// as for a model's first layer, whose input needs no gradient). A layer computes on one
/// device (the CPU until to() moves it) in one precision policy, through that device's
/// backend; its inputs must be on its device.
class Layer {
 public:
  explicit Layer(std::string name) : name_(std::move(name)) {}
  virtual ~Layer() = default;
  Layer(const Layer&) = delete;
  Layer& operator=(const Layer&) = delete;

  const std::string& name() const { return name_; }
  virtual ConstTensorView forward(ConstTensorView x) = 0;
  virtual ConstTensorView backward(ConstTensorView dy) = 0;
  virtual std::vector<Parameter> parameters() { return {}; }
  /// Whether forward() can take an input of `shape`: a batch from outside (a data file of
  /// another shape) is an error naming the layer, never an invariant break in forward().
  virtual Status check_input(const Shape& shape) const {
    (void)shape;
    return {};
  }

  bool input_grad() const { return input_grad_; }
  void set_input_grad(bool needed) { input_grad_ = needed; }

  /// Moves the parameters and their gradients to `device` (values copied) and computes
  /// there in policy `precision` from now on. A device no backend serves is an error
  /// naming it, and nothing moves.
  Status to(Device device, Precision precision = Precision::float32);
  Device device() const { return device_; }
  Precision precision() const { return precision_; }

 protected:
  Backend& backend() const { return *backend_; }
  /// `t` with `shape` on this layer's device, made there if it lives elsewhere; its
  /// contents are unspecified. Per-step buffers keep their allocation.
  Tensor& place(Tensor& t, const Shape& shape) {
    if (t.device() != device_)
      t = Tensor(shape, DType::float32, device_);
    else
      t.resize(shape);
    return t;
  }
  /// Asserts that `x` lives where this layer computes.
  void check_device(ConstTensorView x) const {
    TROUPE_ASSERT(x.device() == device_, "a layer's input on another device than the layer");
  }

 private:
  std::string name_;
  bool input_grad_ = true;
  Device device_;
  Precision precision_ = Precision::float32;
  Backend* backend_ = &cpu_backend();
};

}  // namespace troupe::core
