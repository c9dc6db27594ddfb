#pragma once

#include <cstdint>

#include "core/nn/layer.hpp"

namespace troupe::core {

/// What a Dense layer applies to its output (Keras' `activation` argument).
enum class Activation { none, relu };

/// y = x W + b, with W of shape [in, out] (Keras' kernel layout), Glorot-uniform initialised,
/// b zeros. x is [batch, in]. With Activation::relu, y = max(x W + b, 0), the two computed
/// together where the backend can (the CPU: one pass over y each way instead of three).
class Dense final : public Layer {
 public:
  Dense(std::string name, int64_t in, int64_t out, uint64_t seed,
        Activation activation = Activation::none);

  ConstTensorView forward(ConstTensorView x) override;
  Status check_input(const Shape& shape) const override;
  ConstTensorView backward(ConstTensorView dy) override;
  std::vector<Parameter> parameters() override;

  Tensor& kernel() { return w_; }
  Tensor& bias() { return b_; }

 private:
  Activation activation_;
  Tensor w_, b_, dw_, db_;
  Tensor y_, dx_, dz_;  // dz_: the ReLU's gradient, where the backend needs room for it
  ConstTensorView x_;
};

}  // namespace troupe::core
