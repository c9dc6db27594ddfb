#pragma once

#include <cstdint>
#include <memory>

#include "core/nn/layer.hpp"

namespace troupe::core {

/// 2-D convolution, stride 1, 'valid' padding, NHWC layout: [batch, h, w, in_channels] ->
/// [batch, h-k+1, w-k+1, filters]. The kernel is [k, k, in_channels, filters] (Keras'
/// layout), Glorot-uniform initialised. On the CPU one GEMM over im2col patches; on a GPU
/// cuDNN's convolution.
class Conv2D final : public Layer {
 public:
  Conv2D(std::string name, int64_t in_channels, int64_t filters, int64_t kernel_size,
         uint64_t seed);

  ConstTensorView forward(ConstTensorView x) override;
  ConstTensorView backward(ConstTensorView dy) override;
  std::vector<Parameter> parameters() override;

 private:
  int64_t in_channels_, filters_, k_;
  Tensor w_, b_, dw_, db_;
  Tensor y_, dx_;
  ConstTensorView x_;
  std::unique_ptr<Workspace> workspace_;  // the backend's, kept from forward to backward
};

}  // namespace troupe::core
