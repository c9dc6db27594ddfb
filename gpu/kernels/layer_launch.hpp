#pragma once

// Launchers of the layer graph's kernels (gpu/kernels/layer_ops.cu, bodies in
// layer_ops.cuh): each runs its body over its index space on `stream` and returns the
// launch's error. Plain device pointers; a null gamma, beta, x or y means "none".

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/layer_ops.hpp"

namespace troupe::gpu::launch {

cudaError_t activation_forward(cudaStream_t s, core::ActFn f, const float* x, float* y, int64_t n,
                               int64_t last);
cudaError_t activation_backward(cudaStream_t s, core::ActFn f, const float* x, const float* y,
                                const float* dy, float* dx, int64_t n, int64_t last);
cudaError_t axpby(cudaStream_t s, float a, const float* x, float b, float* y, int64_t n);
cudaError_t multiply(cudaStream_t s, const float* x1, const float* x2, float* y, int64_t n,
                     bool accumulate);
cudaError_t copy_columns(cudaStream_t s, const float* src, float* dst, int64_t r, int64_t c,
                         int64_t C, int64_t offset, bool accumulate);
cudaError_t take_columns(cudaStream_t s, const float* src, float* dst, int64_t r, int64_t c,
                         int64_t C, int64_t offset);
cudaError_t reduce_middle(cudaStream_t s, core::Reduce op, const float* x, float* y, int64_t a,
                          int64_t m, int64_t c);
cudaError_t reduce_middle_backward(cudaStream_t s, core::Reduce op, const float* x, const float* y,
                                   const float* dy, float* dx, int64_t a, int64_t m, int64_t c);
cudaError_t row_dot(cudaStream_t s, const float* x1, const float* x2, float* y, int64_t r,
                    int64_t c);
cudaError_t scale_rows(cudaStream_t s, const float* x, const float* scale, float* y, int64_t r,
                       int64_t c, bool accumulate);
cudaError_t column_sums(cudaStream_t s, const float* x, float* y, int64_t r, int64_t c,
                        bool accumulate);
cudaError_t moments(cudaStream_t s, const float* x, float* mean, float* var, int64_t r, int64_t c);
cudaError_t batch_norm_forward(cudaStream_t s, const float* x, const float* mean, const float* var,
                               const float* gamma, const float* beta, float epsilon, float* y,
                               int64_t r, int64_t c);
cudaError_t batch_norm_sums(cudaStream_t s, const float* x, const float* mean, const float* var,
                            float epsilon, const float* dy, float* sum_dy, float* sum_dy_xhat,
                            int64_t r, int64_t c);
cudaError_t batch_norm_dx(cudaStream_t s, const float* x, const float* mean, const float* var,
                          const float* gamma, float epsilon, bool batch_stats, const float* dy,
                          const float* sum_dy, const float* sum_dy_xhat, float* dx, int64_t r,
                          int64_t c);
cudaError_t layer_norm_forward(cudaStream_t s, const float* x, const float* gamma,
                               const float* beta, float epsilon, float* y, float* mean, float* rstd,
                               int64_t r, int64_t c);
cudaError_t layer_norm_backward(cudaStream_t s, const float* x, const float* gamma,
                                const float* mean, const float* rstd, const float* dy, float* dx,
                                int64_t r, int64_t c);
cudaError_t layer_norm_param_grads(cudaStream_t s, const float* x, const float* mean,
                                   const float* rstd, const float* dy, float* dgamma, float* dbeta,
                                   int64_t r, int64_t c);
cudaError_t dropout(cudaStream_t s, const float* x, float* y, int64_t n, float rate, uint64_t seed);

}  // namespace troupe::gpu::launch
