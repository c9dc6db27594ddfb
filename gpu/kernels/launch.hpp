#pragma once

// Launchers of the kernels of gpu/kernels/*.cu: each runs a body of the .cuh files over its
// index space on `stream` and returns the launch's error (cudaSuccess when queued). Plain
// pointers: the CUDA backend (gpu/cuda_backend.*) hands over its views' device addresses.

#include <cuda_runtime_api.h>

#include <cstdint>

#include "gpu/kernels/optimizer.cuh"

namespace troupe::gpu::launch {

cudaError_t relu_forward(cudaStream_t s, const float* x, float* y, int64_t n);
cudaError_t relu_backward(cudaStream_t s, const float* y, const float* dy, float* dx, int64_t n);
cudaError_t add(cudaStream_t s, const float* x, float* y, int64_t n);
cudaError_t scale(cudaStream_t s, float* x, float factor, int64_t n);
cudaError_t fill(cudaStream_t s, void* x, int64_t n, int element_bytes, uint64_t pattern);
cudaError_t check_finite(cudaStream_t s, const float* x, int64_t n, int* flag);
/// out[j] (+)= sum over rows of x[r, j] (times w[r] when w is given); see k::column_sum.
cudaError_t column_sum(cudaStream_t s, const float* x, const float* w, float* out, int64_t rows,
                       int64_t cols, bool accumulate = false);
cudaError_t add_bias(cudaStream_t s, float* y, const float* b, int64_t n, int64_t channels);
/// t: 1 bfloat16, 2 float16.
cudaError_t to_half(cudaStream_t s, const float* x, uint16_t* y, int64_t n, int t);
cudaError_t from_half(cudaStream_t s, const uint16_t* x, float* y, int64_t n, int t);
/// t: 1 bfloat16, 2 float16, 3 TF32.
cudaError_t round_values(cudaStream_t s, const float* x, float* y, int64_t n, int t);
cudaError_t hwio_to_ohwi(cudaStream_t s, const float* hwio, float* ohwi, int64_t khw, int64_t c,
                         int64_t f);
cudaError_t ohwi_to_hwio(cudaStream_t s, const float* ohwi, float* hwio, int64_t khw, int64_t c,
                         int64_t f);

cudaError_t softmax_cross_entropy(cudaStream_t s, const float* logits, const int32_t* labels,
                                  float* probs, float* grad, double* loss_sum, int64_t n, int64_t c,
                                  float inv_n_scale);
cudaError_t sigmoid_cross_entropy(cudaStream_t s, const float* logits, const float* labels,
                                  float* grad, double* loss_sum, int64_t n, float inv_n_scale);
cudaError_t count_correct(cudaStream_t s, const float* logits, const int32_t* labels,
                          unsigned long long* correct, int64_t n, int64_t c);
cudaError_t binary_metrics(cudaStream_t s, const float* logits, const float* labels,
                           unsigned long long* pos, unsigned long long* neg,
                           unsigned long long* correct, int64_t n, int64_t buckets);

cudaError_t optimizer_dense(cudaStream_t s, const kernels::OptimizerStep& c, float* w,
                            const float* g, float* s0, float* s1, int64_t n);
cudaError_t optimizer_rows(cudaStream_t s, const kernels::OptimizerStep& c, const int64_t* rows,
                           int64_t count, int64_t width, float* w, const float* g, float* s0,
                           float* s1);

}  // namespace troupe::gpu::launch
