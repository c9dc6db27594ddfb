// The CPU's matrix products: Dense and Conv2D (one GEMM over im2col patches), forward and
// backward, split over the intra-op threads.
#include <algorithm>

#include "core/cpu/cpu_backend.hpp"
#include "core/half.hpp"
#include "core/parallel.hpp"

namespace troupe::core {

namespace {

// Below these, a matrix product stays on one thread: splitting costs more than it saves.
constexpr int64_t kRowGrain = 32;
constexpr int64_t kColumnGrain = 32;

// Rounded operands of the low-precision policies (unused under float32). One set per
// thread: steps of several models may run on different threads.
struct Operands {
  Tensor x, w, dy;
};
Operands& operands() {
  thread_local Operands o;
  return o;
}

struct ConvWorkspace final : Workspace {
  Tensor patches, dpatches;
};

ConvWorkspace& conv_workspace(std::unique_ptr<Workspace>& ws) {
  if (!ws) ws = std::make_unique<ConvWorkspace>();
  return static_cast<ConvWorkspace&>(*ws);
}

}  // namespace

void CpuBackend::dense_forward(ConstTensorView x_in, ConstTensorView w_in, ConstTensorView b,
                               TensorView y, Precision p) {
  auto& ops = operands();
  const ConstTensorView x = rounded_operand(x_in, p, ops.x);
  const ConstTensorView w = rounded_operand(w_in, p, ops.w);
  // Rows of the batch in parallel (intra-op threads; one chunk when there is one thread).
  parallel_for(x.shape()[0], kRowGrain, [&](int64_t r0, int64_t r1) {
    auto ym = y.matrix().middleRows(r0, r1 - r0);
    ym.noalias() = x.matrix().middleRows(r0, r1 - r0) * w.matrix();
    ym.rowwise() += Eigen::Map<const Eigen::RowVectorXf>(b.data(), b.size());
  });
}

void CpuBackend::dense_backward(ConstTensorView x_in, ConstTensorView w_in, ConstTensorView dy,
                                TensorView dw, TensorView db, TensorView dx, Precision p) {
  auto& ops = operands();
  const ConstTensorView x = rounded_operand(x_in, p, ops.x);
  const ConstTensorView w = rounded_operand(w_in, p, ops.w);
  const auto g = rounded_operand(dy, p, ops.dy).matrix();
  const auto g32 = dy.matrix();  // the bias' gradient sums float32 values
  // The kernel's gradient sums over the batch: split it by output column instead.
  parallel_for(w.shape()[1], kColumnGrain, [&](int64_t c0, int64_t c1) {
    dw.matrix().middleCols(c0, c1 - c0).noalias() =
        x.matrix().transpose() * g.middleCols(c0, c1 - c0);
    Eigen::Map<Eigen::RowVectorXf>(db.data() + c0, c1 - c0) =
        g32.middleCols(c0, c1 - c0).colwise().sum();
  });
  if (dx.empty()) return;
  parallel_for(dy.shape()[0], kRowGrain, [&](int64_t r0, int64_t r1) {
    dx.matrix().middleRows(r0, r1 - r0).noalias() =
        g.middleRows(r0, r1 - r0) * w.matrix().transpose();
  });
}

void CpuBackend::conv2d_forward(ConstTensorView x, ConstTensorView w_in, ConstTensorView b,
                                TensorView y, std::unique_ptr<Workspace>& ws, Precision p) {
  auto& cw = conv_workspace(ws);
  const int64_t n = x.shape()[0], h = x.shape()[1], wd = x.shape()[2], c = x.shape()[3];
  const int64_t k = w_in.shape()[0], filters = w_in.shape()[3];
  const int64_t oh = h - k + 1, ow = wd - k + 1, kdim = k * k * c;
  cw.patches.resize(Shape{n * oh * ow, kdim});
  float* pp = cw.patches.data();
  for (int64_t bi = 0; bi < n; ++bi)
    for (int64_t i = 0; i < oh; ++i)
      for (int64_t j = 0; j < ow; ++j)
        for (int64_t ki = 0; ki < k; ++ki) {
          // One kernel row: k * c contiguous input values.
          const float* src = x.data() + ((bi * h + i + ki) * wd + j) * c;
          pp = std::copy_n(src, k * c, pp);
        }
  // The patches are a copy already: rounded in place.
  round_operands(cw.patches.data(), static_cast<size_t>(cw.patches.size()), p);
  const ConstTensorView w = rounded_operand(w_in, p, operands().w);
  auto ym = y.reshaped(Shape{n * oh * ow, filters}).matrix();
  ym.noalias() = cw.patches.matrix() * w.reshaped(Shape{kdim, filters}).matrix();
  ym.rowwise() += Eigen::Map<const Eigen::RowVectorXf>(b.data(), filters);
}

void CpuBackend::conv2d_backward(ConstTensorView x, ConstTensorView w_in, ConstTensorView dy,
                                 TensorView dw, TensorView db, TensorView dx,
                                 std::unique_ptr<Workspace>& ws, Precision p) {
  auto& cw = conv_workspace(ws);
  const int64_t n = x.shape()[0], h = x.shape()[1], wd = x.shape()[2], c = x.shape()[3];
  const int64_t k = w_in.shape()[0], filters = w_in.shape()[3];
  const int64_t oh = h - k + 1, ow = wd - k + 1, kdim = k * k * c;
  auto& ops = operands();
  const ConstTensorView w = rounded_operand(w_in, p, ops.w);
  const auto g32 = dy.reshaped(Shape{n * oh * ow, filters}).matrix();
  const auto g = rounded_operand(dy, p, ops.dy).reshaped(Shape{n * oh * ow, filters}).matrix();
  dw.reshaped(Shape{kdim, filters}).matrix().noalias() = cw.patches.matrix().transpose() * g;
  Eigen::Map<Eigen::RowVectorXf>(db.data(), filters) = g32.colwise().sum();
  if (dx.empty()) return;

  cw.dpatches.resize(cw.patches.shape());
  cw.dpatches.matrix().noalias() = g * w.reshaped(Shape{kdim, filters}).matrix().transpose();
  std::fill_n(dx.data(), dx.size(), 0.0f);
  const float* pp = cw.dpatches.data();
  for (int64_t bi = 0; bi < n; ++bi)
    for (int64_t i = 0; i < oh; ++i)
      for (int64_t j = 0; j < ow; ++j)
        for (int64_t ki = 0; ki < k; ++ki) {
          float* dst = dx.data() + ((bi * h + i + ki) * wd + j) * c;
          for (int64_t e = 0; e < k * c; ++e)
            dst[e] += pp[e];
          pp += k * c;
        }
}

}  // namespace troupe::core
