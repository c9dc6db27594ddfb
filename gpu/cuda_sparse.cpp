// The CUDA backend's kernels of the layer graph's sparse layers (core/backend.hpp): pooling,
// the factorization machine, and an embedding call's gather and scatter, each a launch of
// gpu/kernels/sparse.cu on the backend's stream (after zeroing what is scattered into).
// The convolutions are cuDNN's (gpu/cuda_conv.cpp).
#include "gpu/cuda_backend.hpp"
#include "gpu/kernels/sparse_launch.hpp"

namespace troupe::gpu {

namespace {

core::kernels::Pool2dShape pool_shape(core::ConstTensorView x, const core::Shape& y) {
  return {x.shape()[0], x.shape()[1], x.shape()[2], x.shape()[3], y[1], y[2]};
}

int64_t width_of(const core::Shape& s) {
  return s.rank() == 0 ? 1 : s[s.rank() - 1];
}

}  // namespace

void CudaBackend::pool2d_forward(core::PoolKind k, const core::Pool2dGeometry& g,
                                 core::ConstTensorView x, core::TensorView y) {
  TROUPE_GPU_KERNEL(launch::pool2d_forward(stream_, pool_shape(x, y.shape()), g,
                                           k == core::PoolKind::max, x.data(), y.data()));
}

void CudaBackend::pool2d_backward(core::PoolKind k, const core::Pool2dGeometry& g,
                                  core::ConstTensorView x, core::ConstTensorView y,
                                  core::ConstTensorView dy, core::TensorView dx) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  if (broken()) return;
  set_device();
  TROUPE_GPU_TRY(cudaMemsetAsync(dx.data(), 0, dx.bytes(), stream_));
  TROUPE_GPU_TRY(launch::pool2d_backward(stream_, pool_shape(x, y.shape()), g,
                                         k == core::PoolKind::max, x.data(), y.data(), dy.data(),
                                         dx.data()));
}

void CudaBackend::fm_forward(core::ConstTensorView x, core::TensorView y) {
  TROUPE_GPU_KERNEL(
      launch::fm_forward(stream_, x.data(), y.data(), x.shape()[0], x.shape()[1], x.shape()[2]));
}

void CudaBackend::fm_backward(core::ConstTensorView x, core::ConstTensorView dy,
                              core::TensorView dx) {
  TROUPE_GPU_KERNEL(launch::fm_backward(stream_, x.data(), dy.data(), dx.data(), x.shape()[0],
                                        x.shape()[1], x.shape()[2]));
}

void CudaBackend::gather_index(core::ConstTensorView rows, core::ConstTensorView index,
                               core::TensorView y) {
  TROUPE_GPU_KERNEL(launch::gather_index(stream_, rows.data(), index.data_as<int32_t>(), y.data(),
                                         index.size(), width_of(rows.shape())));
}

void CudaBackend::scatter_add_index(core::ConstTensorView dy, core::ConstTensorView index,
                                    core::TensorView grads) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  if (broken()) return;
  set_device();
  TROUPE_GPU_TRY(cudaMemsetAsync(grads.data(), 0, grads.bytes(), stream_));
  TROUPE_GPU_TRY(launch::scatter_add_index(stream_, dy.data(), index.data_as<int32_t>(),
                                           grads.data(), index.size(), width_of(grads.shape())));
}

}  // namespace troupe::gpu
