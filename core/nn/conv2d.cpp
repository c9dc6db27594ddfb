#include "core/nn/conv2d.hpp"

#include <algorithm>

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
  input_shape_ = x.shape();
  const int64_t n = x.shape()[0], h = x.shape()[1], w = x.shape()[2], c = in_channels_;
  const int64_t oh = h - k_ + 1, ow = w - k_ + 1, kdim = k_ * k_ * c;
  patches_.resize(Shape{n * oh * ow, kdim});
  float* p = patches_.data();
  for (int64_t b = 0; b < n; ++b)
    for (int64_t i = 0; i < oh; ++i)
      for (int64_t j = 0; j < ow; ++j)
        for (int64_t ki = 0; ki < k_; ++ki) {
          // One kernel row: k_ * c contiguous input values.
          const float* src = x.data() + ((b * h + i + ki) * w + j) * c;
          p = std::copy_n(src, k_ * c, p);
        }
  y_.resize(Shape{n, oh, ow, filters_});
  auto y = y_.view().reshaped(Shape{n * oh * ow, filters_}).matrix();
  y.noalias() = patches_.matrix() * w_.view().reshaped(Shape{kdim, filters_}).matrix();
  y.rowwise() += Eigen::Map<const Eigen::RowVectorXf>(b_.data(), filters_);
  return y_;
}

ConstTensorView Conv2D::backward(ConstTensorView dy) {
  TROUPE_ASSERT(dy.shape() == y_.shape(), "Conv2D backward: dy of another shape than y");
  const int64_t n = input_shape_[0], h = input_shape_[1], w = input_shape_[2], c = in_channels_;
  const int64_t oh = h - k_ + 1, ow = w - k_ + 1, kdim = k_ * k_ * c;
  const auto g = dy.reshaped(Shape{n * oh * ow, filters_}).matrix();
  dw_.view().reshaped(Shape{kdim, filters_}).matrix().noalias() = patches_.matrix().transpose() * g;
  Eigen::Map<Eigen::RowVectorXf>(db_.data(), filters_) = g.colwise().sum();
  if (!input_grad()) return {};

  dpatches_.resize(patches_.shape());
  dpatches_.matrix().noalias() = g * w_.view().reshaped(Shape{kdim, filters_}).matrix().transpose();
  dx_.resize(input_shape_);
  dx_.fill(0.0f);
  const float* p = dpatches_.data();
  for (int64_t b = 0; b < n; ++b)
    for (int64_t i = 0; i < oh; ++i)
      for (int64_t j = 0; j < ow; ++j)
        for (int64_t ki = 0; ki < k_; ++ki) {
          float* dst = dx_.data() + ((b * h + i + ki) * w + j) * c;
          for (int64_t e = 0; e < k_ * c; ++e)
            dst[e] += p[e];
          p += k_ * c;
        }
  return dx_;
}

std::vector<Parameter> Conv2D::parameters() {
  return {{name() + "/kernel", &w_, &dw_}, {name() + "/bias", &b_, &db_}};
}

}  // namespace troupe::core
