#pragma once

#include "core/nn/layer.hpp"

namespace troupe::core {

/// y = max(x, 0).
class ReLU final : public Layer {
 public:
  explicit ReLU(std::string name = "relu") : Layer(std::move(name)) {}
  ConstTensorView forward(ConstTensorView x) override;
  ConstTensorView backward(ConstTensorView dy) override;

 private:
  Tensor y_, dx_;
};

/// y = 1 / (1 + exp(-x)).
class Sigmoid final : public Layer {
 public:
  explicit Sigmoid(std::string name = "sigmoid") : Layer(std::move(name)) {}
  ConstTensorView forward(ConstTensorView x) override;
  ConstTensorView backward(ConstTensorView dy) override;

 private:
  Tensor y_, dx_;
};

/// Gives each example the shape `example_shape` (a view, no copy); Flatten is
/// Reshape({n}).
class Reshape final : public Layer {
 public:
  Reshape(std::string name, Shape example_shape);
  ConstTensorView forward(ConstTensorView x) override;
  Status check_input(const Shape& shape) const override;
  ConstTensorView backward(ConstTensorView dy) override;

 private:
  Shape example_shape_;
  Shape input_shape_;
};

/// [batch, n, d] -> [batch, d]: the mean over the middle axis (pooling of embeddings).
class MeanPool final : public Layer {
 public:
  explicit MeanPool(std::string name = "mean_pool") : Layer(std::move(name)) {}
  ConstTensorView forward(ConstTensorView x) override;
  ConstTensorView backward(ConstTensorView dy) override;

 private:
  Shape input_shape_;
  Tensor y_, dx_;
};

}  // namespace troupe::core
