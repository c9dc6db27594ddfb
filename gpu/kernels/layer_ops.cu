// Launchers of the layer graph's kernels (bodies in gpu/kernels/layer_ops.cuh).
#include "core/kernels/grid.cuh"
#include "gpu/kernels/columns.cuh"
#include "gpu/kernels/launch.hpp"
#include "gpu/kernels/layer_launch.hpp"
#include "gpu/kernels/layer_ops.cuh"

namespace troupe::gpu::launch {

using core::kernels::grid::run;
namespace k = kernels;

cudaError_t activation_forward(cudaStream_t s, core::ActFn f, const float* x, float* y, int64_t n,
                               int64_t last) {
  if (f == core::ActFn::softmax || f == core::ActFn::log_softmax) {
    const int64_t rows = last > 0 ? n / last : 0;
    if (f == core::ActFn::log_softmax)
      return run(s, rows, [=] __device__(int64_t r) { k::log_softmax_forward(r, x, y, last); });
    return run(s, rows, [=] __device__(int64_t r) { k::softmax_forward(r, x, y, last); });
  }
  return run(s, n, [=] __device__(int64_t i) { k::activation_forward(i, f, x, y); });
}

cudaError_t activation_backward(cudaStream_t s, core::ActFn f, const float* x, const float* y,
                                const float* dy, float* dx, int64_t n, int64_t last) {
  if (f == core::ActFn::softmax || f == core::ActFn::log_softmax) {
    const int64_t rows = last > 0 ? n / last : 0;
    if (f == core::ActFn::log_softmax)
      return run(s, rows,
                 [=] __device__(int64_t r) { k::log_softmax_backward(r, y, dy, dx, last); });
    return run(s, rows, [=] __device__(int64_t r) { k::softmax_backward(r, y, dy, dx, last); });
  }
  return run(s, n, [=] __device__(int64_t i) { k::activation_backward(i, f, x, y, dy, dx); });
}

cudaError_t axpby(cudaStream_t s, float a, const float* x, float b, float* y, int64_t n) {
  return run(s, n, [=] __device__(int64_t i) { k::axpby(i, a, x, b, y); });
}

cudaError_t multiply(cudaStream_t s, const float* x1, const float* x2, float* y, int64_t n,
                     bool accumulate) {
  return run(s, n, [=] __device__(int64_t i) { k::multiply(i, x1, x2, y, accumulate); });
}

cudaError_t copy_columns(cudaStream_t s, const float* src, float* dst, int64_t r, int64_t c,
                         int64_t C, int64_t offset, bool accumulate) {
  return run(s, r * c,
             [=] __device__(int64_t i) { k::copy_columns(i, src, dst, c, C, offset, accumulate); });
}

cudaError_t take_columns(cudaStream_t s, const float* src, float* dst, int64_t r, int64_t c,
                         int64_t C, int64_t offset) {
  return run(s, r * c, [=] __device__(int64_t i) { k::take_columns(i, src, dst, c, C, offset); });
}

cudaError_t reduce_middle(cudaStream_t s, core::Reduce op, const float* x, float* y, int64_t a,
                          int64_t m, int64_t c) {
  return run(s, a * c, [=] __device__(int64_t i) { k::reduce_middle(i, op, x, y, m, c); });
}

cudaError_t reduce_middle_backward(cudaStream_t s, core::Reduce op, const float* x, const float* y,
                                   const float* dy, float* dx, int64_t a, int64_t m, int64_t c) {
  return run(s, a * c,
             [=] __device__(int64_t i) { k::reduce_middle_backward(i, op, x, y, dy, dx, m, c); });
}

cudaError_t row_dot(cudaStream_t s, const float* x1, const float* x2, float* y, int64_t r,
                    int64_t c) {
  return run(s, r, [=] __device__(int64_t i) { k::row_dot(i, x1, x2, y, c); });
}

cudaError_t scale_rows(cudaStream_t s, const float* x, const float* scale, float* y, int64_t r,
                       int64_t c, bool accumulate) {
  return run(s, r * c, [=] __device__(int64_t i) { k::scale_rows(i, x, scale, y, c, accumulate); });
}

cudaError_t column_sums(cudaStream_t s, const float* x, float* y, int64_t r, int64_t c,
                        bool accumulate) {
  return column_sum(s, x, nullptr, y, r, c, accumulate);
}

cudaError_t moments(cudaStream_t s, const float* x, float* mean, float* var, int64_t r, int64_t c) {
  // Divided by r as the host body and the CPU divide (not times 1/r: one rounding fewer).
  const auto n = static_cast<float>(r);
  const cudaError_t e = detail::run_columns<1>(
      s, r, c, k::WeightedColumns{x, nullptr, c},
      [=] __device__(int64_t j, const float(&sum)[1]) { mean[j] = sum[0] / n; });
  if (e != cudaSuccess) return e;
  return detail::run_columns<1>(
      s, r, c, k::Deviations{x, mean, c},
      [=] __device__(int64_t j, const float(&sum)[1]) { var[j] = sum[0] / n; });
}

cudaError_t batch_norm_forward(cudaStream_t s, const float* x, const float* mean, const float* var,
                               const float* gamma, const float* beta, float epsilon, float* y,
                               int64_t r, int64_t c) {
  return run(s, r * c, [=] __device__(int64_t i) {
    k::batch_norm_forward(i, x, mean, var, gamma, beta, epsilon, y, c);
  });
}

cudaError_t batch_norm_sums(cudaStream_t s, const float* x, const float* mean, const float* var,
                            float epsilon, const float* dy, float* sum_dy, float* sum_dy_xhat,
                            int64_t r, int64_t c) {
  return detail::run_columns<2>(s, r, c, k::BatchNormTerms{x, mean, var, epsilon, dy, c},
                                [=] __device__(int64_t j, const float(&sums)[2]) {
                                  sum_dy[j] = sums[0];
                                  sum_dy_xhat[j] = sums[1];
                                });
}

cudaError_t batch_norm_dx(cudaStream_t s, const float* x, const float* mean, const float* var,
                          const float* gamma, float epsilon, bool batch_stats, const float* dy,
                          const float* sum_dy, const float* sum_dy_xhat, float* dx, int64_t r,
                          int64_t c) {
  return run(s, r * c, [=] __device__(int64_t i) {
    k::batch_norm_dx(i, x, mean, var, gamma, epsilon, batch_stats, dy, sum_dy, sum_dy_xhat, dx, r,
                     c);
  });
}

cudaError_t layer_norm_forward(cudaStream_t s, const float* x, const float* gamma,
                               const float* beta, float epsilon, float* y, float* mean, float* rstd,
                               int64_t r, int64_t c) {
  return run(s, r, [=] __device__(int64_t i) {
    k::layer_norm_forward(i, x, gamma, beta, epsilon, y, mean, rstd, c);
  });
}

cudaError_t layer_norm_backward(cudaStream_t s, const float* x, const float* gamma,
                                const float* mean, const float* rstd, const float* dy, float* dx,
                                int64_t r, int64_t c) {
  return run(s, r, [=] __device__(int64_t i) {
    k::layer_norm_backward(i, x, gamma, mean, rstd, dy, dx, c);
  });
}

cudaError_t layer_norm_param_grads(cudaStream_t s, const float* x, const float* mean,
                                   const float* rstd, const float* dy, float* dgamma, float* dbeta,
                                   int64_t r, int64_t c) {
  return detail::run_columns<2>(s, r, c, k::LayerNormParamTerms{x, mean, rstd, dy, c},
                                [=] __device__(int64_t j, const float(&sums)[2]) {
                                  if (dgamma != nullptr) dgamma[j] = sums[0];
                                  if (dbeta != nullptr) dbeta[j] = sums[1];
                                });
}

cudaError_t dropout(cudaStream_t s, const float* x, float* y, int64_t n, float rate,
                    uint64_t seed) {
  return run(s, n, [=] __device__(int64_t i) { k::dropout(i, x, y, rate, seed); });
}

}  // namespace troupe::gpu::launch
