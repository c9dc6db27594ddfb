#include "core/nn/activations.hpp"

namespace troupe::core {

ConstTensorView ReLU::forward(ConstTensorView x) {
  check_device(x);
  backend().relu_forward(x, place(y_, x.shape()));
  return y_;
}

ConstTensorView ReLU::backward(ConstTensorView dy) {
  TROUPE_ASSERT(dy.shape() == y_.shape(), "ReLU backward: dy of another shape than y");
  if (!input_grad()) return {};
  backend().relu_backward(y_, dy, place(dx_, dy.shape()));
  return dx_;
}

ConstTensorView Sigmoid::forward(ConstTensorView x) {
  check_device(x);
  backend().sigmoid_forward(x, place(y_, x.shape()));
  return y_;
}

ConstTensorView Sigmoid::backward(ConstTensorView dy) {
  TROUPE_ASSERT(dy.shape() == y_.shape(), "Sigmoid backward: dy of another shape than y");
  if (!input_grad()) return {};
  backend().sigmoid_backward(y_, dy, place(dx_, dy.shape()));
  return dx_;
}

Reshape::Reshape(std::string name, Shape example_shape)
    : Layer(std::move(name)), example_shape_(example_shape) {
  TROUPE_ASSERT(example_shape.rank() < Shape::max_rank, "Reshape target rank too large");
}

Status Reshape::check_input(const Shape& shape) const {
  if (shape.rank() >= 1 && shape.row_size() == example_shape_.num_elements()) return {};
  return make_error(Errc::invalid_argument, "layer '" + name() + "' takes examples of " +
                                                std::to_string(example_shape_.num_elements()) +
                                                " values, got " + shape.to_string());
}

ConstTensorView Reshape::forward(ConstTensorView x) {
  TROUPE_ASSERT(x.shape().rank() >= 1 && x.shape().row_size() == example_shape_.num_elements(),
                "Reshape: example size does not match");
  input_shape_ = x.shape();
  std::vector<int64_t> dims{x.shape()[0]};
  for (int i = 0; i < example_shape_.rank(); ++i)
    dims.push_back(example_shape_[i]);
  return x.reshaped(Shape(dims));
}

ConstTensorView Reshape::backward(ConstTensorView dy) {
  if (!input_grad()) return {};
  return dy.reshaped(input_shape_);
}

ConstTensorView MeanPool::forward(ConstTensorView x) {
  TROUPE_ASSERT(x.shape().rank() == 3 && x.shape()[1] > 0,
                "MeanPool input must be [batch, n>0, d]");
  check_device(x);
  input_shape_ = x.shape();
  backend().mean_pool_forward(x, place(y_, Shape{x.shape()[0], x.shape()[2]}));
  return y_;
}

ConstTensorView MeanPool::backward(ConstTensorView dy) {
  if (!input_grad()) return {};
  TROUPE_ASSERT(dy.shape() == (Shape{input_shape_[0], input_shape_[2]}),
                "MeanPool backward: dy must be [batch, d]");
  backend().mean_pool_backward(dy, place(dx_, input_shape_));
  return dx_;
}

}  // namespace troupe::core
