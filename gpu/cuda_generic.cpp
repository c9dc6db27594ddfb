// The CUDA backend's generic kernels (core/backend.hpp, "Generic kernels"): each plans its
// index space on the host (core/kernels/plan.hpp) and launches the body core/kernels/generic.cu
// shares with the CPU backend, on the backend's stream. Batched matrix products are one
// cuBLASLt product per batch, in order on the stream (a strided-batch descriptor is the
// next step once measured on a GPU).
#include "core/kernels/generic_launch.hpp"
#include "core/kernels/plan.hpp"
#include "gpu/cuda_backend.hpp"

namespace troupe::gpu {

namespace {

cudaError_t as_cuda(int e) {
  return static_cast<cudaError_t>(e);
}

}  // namespace

void CudaBackend::elementwise(core::ElementOp op, const std::vector<core::ConstTensorView>& in,
                              core::TensorView y) {
  const auto a = core::kernels::elementwise_args(op, in, y);
  TROUPE_GPU_KERNEL(as_cuda(core::kernels::cuda::elementwise(stream_, a, y.size())));
}

void CudaBackend::elementwise_backward(core::ElementOp op, int which,
                                       const std::vector<core::ConstTensorView>& in,
                                       core::ConstTensorView y, core::ConstTensorView dy,
                                       core::TensorView dx, bool accumulate) {
  const auto a = core::kernels::elementwise_grad_args(op, which, in, y, dy, dx, accumulate);
  TROUPE_GPU_KERNEL(as_cuda(core::kernels::cuda::elementwise_grad(stream_, a, dx.size())));
}

void CudaBackend::reduce(core::Reduce op, core::ConstTensorView x, core::TensorView y) {
  const auto a = core::kernels::reduce_args(op, x, y);
  TROUPE_GPU_KERNEL(as_cuda(core::kernels::cuda::reduce(stream_, a, y.size())));
}

void CudaBackend::reduce_backward(core::Reduce op, core::ConstTensorView x, core::ConstTensorView y,
                                  core::ConstTensorView dy, core::TensorView dx, bool accumulate) {
  const auto a = core::kernels::reduce_grad_args(op, x, y, dy, dx, accumulate);
  TROUPE_GPU_KERNEL(as_cuda(core::kernels::cuda::reduce_grad(stream_, a, y.size())));
}

void CudaBackend::copy_strided(const core::kernels::IndexSpace<2>& at, core::ConstTensorView src,
                               core::TensorView dst, bool accumulate) {
  const auto a = core::kernels::copy_args(at, src, dst, accumulate);
  TROUPE_GPU_KERNEL(as_cuda(core::kernels::cuda::copy(stream_, a, at.size())));
}

void CudaBackend::gather(core::ConstTensorView x, core::ConstTensorView index, core::TensorView y) {
  auto a = core::kernels::gather_args(x.shape(), index, y.shape());
  a.x = x.data();
  a.y = y.data();
  TROUPE_GPU_KERNEL(as_cuda(core::kernels::cuda::gather(stream_, a, y.size())));
}

void CudaBackend::gather_backward(core::ConstTensorView dy, core::ConstTensorView index,
                                  core::TensorView dx, bool accumulate) {
  const auto a = core::kernels::gather_args(dx.shape(), index, dy.shape());
  TROUPE_GPU_KERNEL(as_cuda(
      core::kernels::cuda::scatter(stream_, a, dy.data(), dx.data(), accumulate, dx.size())));
}

void CudaBackend::matmul(const core::MatmulGeometry& g, core::ConstTensorView a,
                         core::ConstTensorView b, core::TensorView y, core::Precision p) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  if (broken()) return;
  set_device();
  if (g.m == 0 || g.n == 0) return;
  if (g.k == 0) {  // empty sums: zeros, where nothing is accumulated into them
    if (!g.accumulate) fill(y, 0.0f);
    return;
  }
  // Row-major Y = op(A) op(B) is column-major Y^T = op(B)^T op(A)^T: gemm() with the operands
  // swapped, as the Dense kernels do (gpu/cuda_dense.cpp).
  const int64_t lda = g.transpose_a ? g.m : g.k, ldb = g.transpose_b ? g.k : g.n;
  for (int64_t i = 0; i < g.batch; ++i) {
    const float* ai = a.data() + i * g.stride_a;
    const float* bi = b.data() + i * g.stride_b;
    float* yi = y.data() + i * g.stride_y;
    const bool sum = g.accumulate || (g.stride_y == 0 && i > 0);
    if (!sum) {
      gemm(g.transpose_b, g.transpose_a, g.n, g.m, g.k, bi, ldb, ai, lda, yi, g.n, nullptr, p);
      continue;
    }
    // Accumulating: the product into scratch, then added (gemm() writes with beta 0).
    auto* tmp = static_cast<float*>(scratch(12, static_cast<size_t>(g.m * g.n) * sizeof(float)));
    gemm(g.transpose_b, g.transpose_a, g.n, g.m, g.k, bi, ldb, ai, lda, tmp, g.n, nullptr, p);
    const core::ConstTensorView part(tmp, core::Shape{g.m, g.n}, device(), core::DType::float32);
    add(part, core::TensorView(yi, core::Shape{g.m, g.n}, device(), core::DType::float32));
  }
}

}  // namespace troupe::gpu
