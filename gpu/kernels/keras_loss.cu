// Launchers of the compile() losses (core/kernels/loss.hpp's bodies). Each thread sums its
// indices' losses, a warp adds its threads' sums with shuffles, and one atomic per warp
// reaches the total: one double atomic per element would serialize a large batch on a
// single address.
#include "core/kernels/loss.hpp"
#include "gpu/kernels/hd.cuh"
#include "gpu/kernels/keras_loss.hpp"

namespace troupe::gpu::launch {

namespace {

constexpr int kThreads = 256;  // a multiple of the warp size: every warp is whole

template <class Body>
__global__ void sum_over_index(int64_t n, Body body, double* sum) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  double local = 0.0;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    local += static_cast<double>(body(i));
  // Every thread of the block gets here, so all 32 lanes take part in the shuffles.
  for (int offset = 16; offset > 0; offset /= 2)
    local += __shfl_down_sync(0xffffffffu, local, offset);
  if ((threadIdx.x & 31) == 0) kernels::atomic_add(sum, local);
}

template <class Body>
cudaError_t run_sum(cudaStream_t s, int64_t n, Body body, double* sum) {
  if (n <= 0) return cudaSuccess;
  const int64_t wanted = (n + kThreads - 1) / kThreads;
  const auto blocks = static_cast<unsigned>(wanted < (int64_t{1} << 16) ? wanted : (1 << 16));
  sum_over_index<<<blocks, kThreads, 0, s>>>(n, body, sum);
  return cudaGetLastError();
}

}  // namespace

cudaError_t keras_loss_elements(cudaStream_t s, bool bce, const float* pred, const float* labels,
                                float* grad, double* loss_sum, int64_t n, float scale) {
  if (bce)
    return run_sum(
        s, n,
        [=] __device__(int64_t i) {
          return core::kernels::binary_crossentropy(pred[i], labels[i], scale, grad + i);
        },
        loss_sum);
  return run_sum(
      s, n,
      [=] __device__(int64_t i) {
        return core::kernels::squared_error(pred[i], labels[i], scale, grad + i);
      },
      loss_sum);
}

cudaError_t keras_loss_rows(cudaStream_t s, const float* pred, const float* labels,
                            const int32_t* classes, float* grad, double* loss_sum, int64_t rows,
                            int64_t c, bool logits, float scale) {
  return run_sum(
      s, rows,
      [=] __device__(int64_t r) {
        return core::kernels::categorical_crossentropy_row(
            pred + r * c, labels != nullptr ? labels + r * c : nullptr,
            labels != nullptr ? 0 : classes[r], c, logits, scale, grad + r * c);
      },
      loss_sum);
}

}  // namespace troupe::gpu::launch
