#include "core/nn/dense.hpp"

#include "core/partitioner.hpp"

namespace troupe::core {

Dense::Dense(std::string name, int64_t in, int64_t out, uint64_t seed)
    : Layer(std::move(name)),
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
  x_ = x;
  y_.resize(Shape{x.shape()[0], w_.shape()[1]});
  auto y = y_.matrix();
  y.noalias() = x.matrix() * w_.matrix();
  y.rowwise() += Eigen::Map<const Eigen::RowVectorXf>(b_.data(), b_.size());
  return y_;
}

ConstTensorView Dense::backward(ConstTensorView dy) {
  TROUPE_ASSERT(dy.shape() == y_.shape(), "Dense backward: dy of another shape than y");
  const auto g = dy.matrix();
  dw_.matrix().noalias() = x_.matrix().transpose() * g;
  Eigen::Map<Eigen::RowVectorXf>(db_.data(), db_.size()) = g.colwise().sum();
  if (!input_grad()) return {};
  dx_.resize(x_.shape());
  dx_.matrix().noalias() = g * w_.matrix().transpose();
  return dx_;
}

std::vector<Parameter> Dense::parameters() {
  return {{name() + "/kernel", &w_, &dw_}, {name() + "/bias", &b_, &db_}};
}

}  // namespace troupe::core
