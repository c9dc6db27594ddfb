#pragma once

#include <cstdint>

#include "core/nn/layer.hpp"

namespace troupe::core {

/// y = x W + b, with W of shape [in, out] (Keras' kernel layout), Glorot-uniform initialised,
/// b zeros. x is [batch, in].
class Dense final : public Layer {
 public:
  Dense(std::string name, int64_t in, int64_t out, uint64_t seed);

  ConstTensorView forward(ConstTensorView x) override;
  Status check_input(const Shape& shape) const override;
  ConstTensorView backward(ConstTensorView dy) override;
  std::vector<Parameter> parameters() override;

  Tensor& kernel() { return w_; }
  Tensor& bias() { return b_; }

 private:
  Tensor w_, b_, dw_, db_;
  Tensor y_, dx_;
  ConstTensorView x_;
};

}  // namespace troupe::core
