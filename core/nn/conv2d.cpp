#include "core/nn/conv2d.hpp"

#include "core/partitioner.hpp"

namespace troupe::core {

Conv2D::Conv2D(std::string name, int64_t in_channels, int64_t filters, int64_t kernel_size,
               uint64_t seed)
    : Layer(std::move(name)),
      in_channels_(in_channels),
      filters_(filters),
      k_(kernel_size),
      w_(initialize(Shape{kernel_size, kernel_size, in_channels, filters},
                    Initializer{Initializer::Kind::glorot_uniform, 0.0f, seed})),
      b_(Shape{filters}),
      dw_(w_.shape()),
      db_(Shape{filters}) {}

ConstTensorView Conv2D::forward(ConstTensorView x) {
  TROUPE_ASSERT(x.shape().rank() == 4 && x.shape()[3] == in_channels_ && x.shape()[1] >= k_ &&
                    x.shape()[2] >= k_,
                "Conv2D input must be [batch, h>=k, w>=k, in_channels]");
  check_device(x);
  x_ = x;
  const int64_t n = x.shape()[0], oh = x.shape()[1] - k_ + 1, ow = x.shape()[2] - k_ + 1;
  place(y_, Shape{n, oh, ow, filters_});
  backend().conv2d_forward(x, w_, b_, y_, workspace_, precision());
  return y_;
}

ConstTensorView Conv2D::backward(ConstTensorView dy) {
  TROUPE_ASSERT(dy.shape() == y_.shape(), "Conv2D backward: dy of another shape than y");
  TensorView dx;
  if (input_grad()) dx = place(dx_, x_.shape());
  backend().conv2d_backward(x_, w_, dy, dw_, db_, dx, workspace_, precision());
  return dx;
}

std::vector<Parameter> Conv2D::parameters() {
  return {{name() + "/kernel", &w_, &dw_}, {name() + "/bias", &b_, &db_}};
}

}  // namespace troupe::core
