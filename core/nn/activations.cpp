#include "core/nn/activations.hpp"

namespace troupe::core {

ConstTensorView ReLU::forward(ConstTensorView x) {
  y_.resize(x.shape());
  y_.view().flat().array() = x.flat().array().max(0.0f);
  return y_;
}

ConstTensorView ReLU::backward(ConstTensorView dy) {
  TROUPE_ASSERT(dy.shape() == y_.shape(), "ReLU backward: dy of another shape than y");
  if (!input_grad()) return {};
  dx_.resize(dy.shape());
  // y > 0 exactly where x > 0, so the output serves as the mask.
  dx_.view().flat().array() = (y_.view().flat().array() > 0.0f).select(dy.flat().array(), 0.0f);
  return dx_;
}

ConstTensorView Sigmoid::forward(ConstTensorView x) {
  y_.resize(x.shape());
  y_.view().flat().array() = 1.0f / (1.0f + (-x.flat().array()).exp());
  return y_;
}

ConstTensorView Sigmoid::backward(ConstTensorView dy) {
  TROUPE_ASSERT(dy.shape() == y_.shape(), "Sigmoid backward: dy of another shape than y");
  if (!input_grad()) return {};
  dx_.resize(dy.shape());
  const auto y = y_.view().flat().array();
  dx_.view().flat().array() = dy.flat().array() * y * (1.0f - y);
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
  input_shape_ = x.shape();
  const int64_t b = x.shape()[0], n = x.shape()[1], d = x.shape()[2];
  y_.resize(Shape{b, d});
  auto y = y_.matrix();
  y.setZero();
  for (int64_t i = 0; i < b; ++i) {
    ConstMatrixMap rows(x.data() + i * n * d, n, d);
    y.row(i) = rows.colwise().sum() / static_cast<float>(n);
  }
  return y_;
}

ConstTensorView MeanPool::backward(ConstTensorView dy) {
  if (!input_grad()) return {};
  const int64_t b = input_shape_[0], n = input_shape_[1], d = input_shape_[2];
  TROUPE_ASSERT(dy.shape() == (Shape{b, d}), "MeanPool backward: dy must be [batch, d]");
  dx_.resize(input_shape_);
  const float inv = 1.0f / static_cast<float>(n);
  for (int64_t i = 0; i < b; ++i) {
    MatrixMap rows(dx_.data() + i * n * d, n, d);
    rows.rowwise() = dy.matrix().row(i) * inv;
  }
  return dx_;
}

}  // namespace troupe::core
