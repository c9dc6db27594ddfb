// The CPU's bodies of the generic kernels (core/backend.hpp, "Generic kernels"): the index
// bodies of core/kernels/generic.hpp run over their index space in chunks of the intra-op
// threads, and the matrix products on oneDNN (core/cpu/gemm.hpp) or Eigen. Their CUDA
// bodies are core/kernels/generic.cu, beside this file.
#include <algorithm>

#include "core/cpu/cpu_backend.hpp"
#include "core/cpu/gemm.hpp"
#include "core/kernels/plan.hpp"
#include "core/parallel.hpp"

namespace troupe::core {

namespace {

// Elements per chunk, for bodies that loop over a fiber of `inner` elements each.
int64_t grain(int64_t inner) {
  return std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(1, inner));
}

template <class Body>
void for_each(int64_t n, int64_t g, const Body& body) {
  parallel_for(n, g, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      body(i);
  });
}

}  // namespace

void CpuBackend::elementwise(ElementOp op, const std::vector<ConstTensorView>& in, TensorView y) {
  const auto a = kernels::elementwise_args(op, in, y);
  for_each(y.size(), kParallelGrain, [&](int64_t i) { kernels::elementwise_at(a, i); });
}

void CpuBackend::elementwise_backward(ElementOp op, int which,
                                      const std::vector<ConstTensorView>& in, ConstTensorView y,
                                      ConstTensorView dy, TensorView dx, bool accumulate) {
  const auto a = kernels::elementwise_grad_args(op, which, in, y, dy, dx, accumulate);
  for_each(dx.size(), grain(a.f.inner.size()),
           [&](int64_t i) { kernels::elementwise_grad_at(a, i); });
}

void CpuBackend::reduce(Reduce op, ConstTensorView x, TensorView y) {
  const auto a = kernels::reduce_args(op, x, y);
  for_each(y.size(), grain(a.f.inner.size()), [&](int64_t i) { kernels::reduce_at(a, i); });
}

void CpuBackend::reduce_backward(Reduce op, ConstTensorView x, ConstTensorView y,
                                 ConstTensorView dy, TensorView dx, bool accumulate) {
  const auto a = kernels::reduce_grad_args(op, x, y, dy, dx, accumulate);
  for_each(y.size(), grain(a.f.inner.size()), [&](int64_t i) { kernels::reduce_grad_at(a, i); });
}

void CpuBackend::copy_strided(const kernels::IndexSpace<2>& at, ConstTensorView src, TensorView dst,
                              bool accumulate) {
  const auto a = kernels::copy_args(at, src, dst, accumulate);
  for_each(at.size(), kParallelGrain, [&](int64_t i) { kernels::copy_at(a, i); });
}

void CpuBackend::gather(ConstTensorView x, ConstTensorView index, TensorView y) {
  auto a = kernels::gather_args(x.shape(), index, y.shape());
  a.x = x.data();
  a.y = y.data();
  for_each(y.size(), kParallelGrain, [&](int64_t i) { kernels::gather_at(a, i); });
}

void CpuBackend::gather_backward(ConstTensorView dy, ConstTensorView index, TensorView dx,
                                 bool accumulate) {
  const auto a = kernels::gather_args(dx.shape(), index, dy.shape());
  for_each(dx.size(), grain(a.k),
           [&](int64_t i) { kernels::scatter_at(a, dy.data(), dx.data(), accumulate, i); });
}

void CpuBackend::matmul(const MatmulGeometry& g, ConstTensorView a, ConstTensorView b, TensorView y,
                        Precision p) {
  (void)p;  // float32: the operations' products are not the step's bulk
  if (g.m == 0 || g.n == 0) return;
  if (g.k == 0) {  // empty sums: zeros, where nothing is accumulated into them
    if (!g.accumulate) fill(y, 0.0f);
    return;
  }
  const int64_t lda = g.transpose_a ? g.m : g.k, ldb = g.transpose_b ? g.k : g.n;
  for (int64_t i = 0; i < g.batch; ++i) {
    const float* ai = a.data() + i * g.stride_a;
    const float* bi = b.data() + i * g.stride_b;
    float* yi = y.data() + i * g.stride_y;
    const bool add = g.accumulate || (g.stride_y == 0 && i > 0);
    cpu::Gemm gm;
    gm.m = g.m;
    gm.n = g.n;
    gm.k = g.k;
    gm.a = {ai, lda, g.transpose_a};
    gm.b = {bi, ldb, g.transpose_b};
    gm.c = yi;
    gm.ldc = g.n;
    gm.accumulate = add;
    if (cpu::gemm_supports(DType::float32) && cpu::gemm(gm)) continue;
    using Stride = Eigen::OuterStride<>;
    using Map = Eigen::Map<const RowMatrix, Eigen::Unaligned, Stride>;
    const Map am(ai, g.transpose_a ? g.k : g.m, g.transpose_a ? g.m : g.k, Stride(lda));
    const Map bm(bi, g.transpose_b ? g.n : g.k, g.transpose_b ? g.k : g.n, Stride(ldb));
    MatrixMap ym(yi, g.m, g.n);
    auto product = [&](const auto& l, const auto& r) {
      if (add)
        ym.noalias() += l * r;
      else
        ym.noalias() = l * r;
    };
    if (g.transpose_a && g.transpose_b)
      product(am.transpose(), bm.transpose());
    else if (g.transpose_a)
      product(am.transpose(), bm);
    else if (g.transpose_b)
      product(am, bm.transpose());
    else
      product(am, bm);
  }
}

}  // namespace troupe::core
