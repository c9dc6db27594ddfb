// The CUDA backend's generic kernels of the layer graph (core/backend.hpp): activations,
// element-wise arithmetic, column copies, reductions, normalizations and dropout, each a
// launch of gpu/kernels/layer_ops.cu on the backend's stream (or a few, in order).
#include "gpu/cuda_backend.hpp"
#include "gpu/kernels/layer_launch.hpp"

namespace troupe::gpu {

namespace {

// Scratch slot of the batch normalization's per-channel sums.
constexpr int kNormSums = 20;

int64_t last_dim(const core::Shape& s) {
  return s.rank() == 0 ? 1 : s[s.rank() - 1];
}

int64_t rows_of(const core::Shape& s) {
  return s.rank() == 0 ? 1 : s[0];
}

const float* or_null(core::ConstTensorView v) {
  return v.empty() ? nullptr : v.data();
}

float* or_null(core::TensorView v) {
  return v.empty() ? nullptr : v.data();
}

}  // namespace

void CudaBackend::activation_forward(core::ActFn f, core::ConstTensorView x, core::TensorView y) {
  TROUPE_GPU_KERNEL(
      launch::activation_forward(stream_, f, x.data(), y.data(), x.size(), last_dim(x.shape())));
}

void CudaBackend::activation_backward(core::ActFn f, core::ConstTensorView x,
                                      core::ConstTensorView y, core::ConstTensorView dy,
                                      core::TensorView dx) {
  TROUPE_GPU_KERNEL(launch::activation_backward(stream_, f, or_null(x), or_null(y), dy.data(),
                                                dx.data(), dy.size(), last_dim(dy.shape())));
}

void CudaBackend::axpby(float a, core::ConstTensorView x, float b, core::TensorView y) {
  TROUPE_GPU_KERNEL(launch::axpby(stream_, a, x.data(), b, y.data(), x.size()));
}

void CudaBackend::multiply(core::ConstTensorView x1, core::ConstTensorView x2, core::TensorView y,
                           bool accumulate) {
  TROUPE_GPU_KERNEL(
      launch::multiply(stream_, x1.data(), x2.data(), y.data(), x1.size(), accumulate));
}

void CudaBackend::copy_columns(core::ConstTensorView src, core::TensorView dst, int64_t offset,
                               bool accumulate) {
  const int64_t r = rows_of(dst.shape());
  TROUPE_GPU_KERNEL(launch::copy_columns(stream_, src.data(), dst.data(), r,
                                         r > 0 ? src.size() / r : 0, r > 0 ? dst.size() / r : 0,
                                         offset, accumulate));
}

void CudaBackend::take_columns(core::ConstTensorView src, int64_t offset, core::TensorView dst) {
  const int64_t r = rows_of(dst.shape());
  TROUPE_GPU_KERNEL(launch::take_columns(stream_, src.data(), dst.data(), r,
                                         r > 0 ? dst.size() / r : 0, r > 0 ? src.size() / r : 0,
                                         offset));
}

void CudaBackend::reduce_middle(core::Reduce op, core::ConstTensorView x, core::TensorView y) {
  TROUPE_GPU_KERNEL(launch::reduce_middle(stream_, op, x.data(), y.data(), x.shape()[0],
                                          x.shape()[1], x.shape()[2]));
}

void CudaBackend::reduce_middle_backward(core::Reduce op, core::ConstTensorView x,
                                         core::ConstTensorView y, core::ConstTensorView dy,
                                         core::TensorView dx) {
  TROUPE_GPU_KERNEL(launch::reduce_middle_backward(stream_, op, or_null(x), or_null(y), dy.data(),
                                                   dx.data(), dx.shape()[0], dx.shape()[1],
                                                   dx.shape()[2]));
}

void CudaBackend::row_dot(core::ConstTensorView x1, core::ConstTensorView x2, core::TensorView y) {
  const int64_t r = y.size();
  TROUPE_GPU_KERNEL(
      launch::row_dot(stream_, x1.data(), x2.data(), y.data(), r, r > 0 ? x1.size() / r : 0));
}

void CudaBackend::scale_rows(core::ConstTensorView x, core::ConstTensorView s, core::TensorView y,
                             bool accumulate) {
  const int64_t r = s.size();
  TROUPE_GPU_KERNEL(launch::scale_rows(stream_, x.data(), s.data(), y.data(), r,
                                       r > 0 ? x.size() / r : 0, accumulate));
}

void CudaBackend::column_sums(core::ConstTensorView x, core::TensorView y, bool accumulate) {
  const int64_t c = y.size();
  TROUPE_GPU_KERNEL(
      launch::column_sums(stream_, x.data(), y.data(), c > 0 ? x.size() / c : 0, c, accumulate));
}

void CudaBackend::moments(core::ConstTensorView x, core::TensorView mean, core::TensorView var) {
  const int64_t c = mean.size();
  TROUPE_GPU_KERNEL(
      launch::moments(stream_, x.data(), mean.data(), var.data(), c > 0 ? x.size() / c : 0, c));
}

void CudaBackend::batch_norm_forward(core::ConstTensorView x, core::ConstTensorView mean,
                                     core::ConstTensorView var, core::ConstTensorView gamma,
                                     core::ConstTensorView beta, float epsilon,
                                     core::TensorView y) {
  const int64_t c = mean.size();
  TROUPE_GPU_KERNEL(launch::batch_norm_forward(stream_, x.data(), mean.data(), var.data(),
                                               or_null(gamma), or_null(beta), epsilon, y.data(),
                                               c > 0 ? x.size() / c : 0, c));
}

void CudaBackend::batch_norm_backward(core::ConstTensorView x, core::ConstTensorView mean,
                                      core::ConstTensorView var, core::ConstTensorView gamma,
                                      float epsilon, bool batch_stats, core::ConstTensorView dy,
                                      core::TensorView dx, core::TensorView dgamma,
                                      core::TensorView dbeta) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  if (broken()) return;
  set_device();
  const int64_t c = mean.size(), r = c > 0 ? x.size() / c : 0;
  const bool sums = !dgamma.empty() || !dbeta.empty() || (batch_stats && !dx.empty());
  float* sum_dy = nullptr;
  float* sum_dy_xhat = nullptr;
  if (sums) {
    const size_t bytes = static_cast<size_t>(c) * sizeof(float);
    sum_dy = static_cast<float*>(scratch(kNormSums, 2 * bytes));
    sum_dy_xhat = sum_dy + c;
    TROUPE_GPU_TRY(launch::batch_norm_sums(stream_, x.data(), mean.data(), var.data(), epsilon,
                                           dy.data(), sum_dy, sum_dy_xhat, r, c));
    if (!dbeta.empty())
      TROUPE_GPU_TRY(
          cudaMemcpyAsync(dbeta.data(), sum_dy, bytes, cudaMemcpyDeviceToDevice, stream_));
    if (!dgamma.empty())
      TROUPE_GPU_TRY(
          cudaMemcpyAsync(dgamma.data(), sum_dy_xhat, bytes, cudaMemcpyDeviceToDevice, stream_));
  }
  if (dx.empty()) return;
  TROUPE_GPU_TRY(launch::batch_norm_dx(stream_, x.data(), mean.data(), var.data(), or_null(gamma),
                                       epsilon, batch_stats, dy.data(), sum_dy, sum_dy_xhat,
                                       dx.data(), r, c));
}

void CudaBackend::layer_norm_forward(core::ConstTensorView x, core::ConstTensorView gamma,
                                     core::ConstTensorView beta, float epsilon, core::TensorView y,
                                     core::TensorView mean, core::TensorView rstd) {
  const int64_t r = mean.size();
  TROUPE_GPU_KERNEL(launch::layer_norm_forward(stream_, x.data(), or_null(gamma), or_null(beta),
                                               epsilon, y.data(), mean.data(), rstd.data(), r,
                                               r > 0 ? x.size() / r : 0));
}

void CudaBackend::layer_norm_backward(core::ConstTensorView x, core::ConstTensorView gamma,
                                      core::ConstTensorView mean, core::ConstTensorView rstd,
                                      core::ConstTensorView dy, core::TensorView dx,
                                      core::TensorView dgamma, core::TensorView dbeta) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  if (broken()) return;
  set_device();
  const int64_t r = mean.size(), c = r > 0 ? x.size() / r : 0;
  if (!dx.empty())
    TROUPE_GPU_TRY(launch::layer_norm_backward(stream_, x.data(), or_null(gamma), mean.data(),
                                               rstd.data(), dy.data(), dx.data(), r, c));
  if (!dgamma.empty() || !dbeta.empty())
    TROUPE_GPU_TRY(launch::layer_norm_param_grads(stream_, x.data(), mean.data(), rstd.data(),
                                                  dy.data(), or_null(dgamma), or_null(dbeta), r,
                                                  c));
}

void CudaBackend::dropout_forward(core::ConstTensorView x, core::TensorView y, float rate,
                                  uint64_t seed) {
  TROUPE_GPU_KERNEL(launch::dropout(stream_, x.data(), y.data(), x.size(), rate, seed));
}

void CudaBackend::dropout_backward(core::ConstTensorView dy, core::TensorView dx, float rate,
                                   uint64_t seed) {
  TROUPE_GPU_KERNEL(launch::dropout(stream_, dy.data(), dx.data(), dy.size(), rate, seed));
}

}  // namespace troupe::gpu
