#include "core/nn/dense.hpp"

#include "core/partitioner.hpp"

namespace troupe::core {

Dense::Dense(std::string name, int64_t in, int64_t out, uint64_t seed, Activation activation)
    : Layer(std::move(name)),
      activation_(activation),
      w_(initialize(Shape{in, out}, Initializer{Initializer::Kind::glorot_uniform, 0.0f, seed})),
      b_(Shape{out}),
      dw_(Shape{in, out}),
      db_(Shape{out}) {}

Status Dense::check_input(const Shape& shape) const {
  if (shape.rank() == 2 && shape[1] == w_.shape()[0]) return {};
  return make_error(Errc::invalid_argument, "layer '" + name() + "' takes [batch, " +
                                                std::to_string(w_.shape()[0]) + "] inputs, got " +
                                                shape.to_string());
}

ConstTensorView Dense::forward(ConstTensorView x) {
  TROUPE_ASSERT(x.shape().rank() == 2 && x.shape()[1] == w_.shape()[0],
                "Dense input must be [batch, in]");
  check_device(x);
  x_ = x;
  place(y_, Shape{x.shape()[0], w_.shape()[1]});
  if (activation_ == Activation::relu)
    backend().dense_relu_forward(x, w_, b_, y_, precision());
  else
    backend().dense_forward(x, w_, b_, y_, precision());
  return y_;
}

ConstTensorView Dense::backward(ConstTensorView dy) {
  TROUPE_ASSERT(dy.shape() == y_.shape(), "Dense backward: dy of another shape than y");
  TensorView dx;
  if (input_grad()) dx = place(dx_, x_.shape());
  if (activation_ == Activation::relu)
    backend().dense_relu_backward(x_, w_, y_, dy, place(dz_, y_.shape()), dw_, db_, dx,
                                  precision());
  else
    backend().dense_backward(x_, w_, dy, dw_, db_, dx, precision());
  return dx;
}

std::vector<Parameter> Dense::parameters() {
  return {{name() + "/kernel", &w_, &dw_}, {name() + "/bias", &b_, &db_}};
}

}  // namespace troupe::core
