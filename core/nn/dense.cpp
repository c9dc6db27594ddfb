#include "core/nn/dense.hpp"

#include "core/parallel.hpp"
#include "core/partitioner.hpp"

namespace troupe::core {

namespace {
// Below these, a matrix product stays on one thread: splitting costs more than it saves.
constexpr int64_t kRowGrain = 32;
constexpr int64_t kColumnGrain = 32;
}  // namespace

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
  // Rows of the batch in parallel (intra-op threads; one chunk when there is one thread).
  parallel_for(x.shape()[0], kRowGrain, [&](int64_t r0, int64_t r1) {
    auto y = y_.matrix().middleRows(r0, r1 - r0);
    y.noalias() = x.matrix().middleRows(r0, r1 - r0) * w_.matrix();
    y.rowwise() += Eigen::Map<const Eigen::RowVectorXf>(b_.data(), b_.size());
  });
  return y_;
}

ConstTensorView Dense::backward(ConstTensorView dy) {
  TROUPE_ASSERT(dy.shape() == y_.shape(), "Dense backward: dy of another shape than y");
  const auto g = dy.matrix();
  // The kernel's gradient sums over the batch: split it by output column instead.
  parallel_for(w_.shape()[1], kColumnGrain, [&](int64_t c0, int64_t c1) {
    dw_.matrix().middleCols(c0, c1 - c0).noalias() =
        x_.matrix().transpose() * g.middleCols(c0, c1 - c0);
    Eigen::Map<Eigen::RowVectorXf>(db_.data() + c0, c1 - c0) =
        g.middleCols(c0, c1 - c0).colwise().sum();
  });
  if (!input_grad()) return {};
  dx_.resize(x_.shape());
  parallel_for(dy.shape()[0], kRowGrain, [&](int64_t r0, int64_t r1) {
    dx_.matrix().middleRows(r0, r1 - r0).noalias() =
        g.middleRows(r0, r1 - r0) * w_.matrix().transpose();
  });
  return dx_;
}

std::vector<Parameter> Dense::parameters() {
  return {{name() + "/kernel", &w_, &dw_}, {name() + "/bias", &b_, &db_}};
}

}  // namespace troupe::core
