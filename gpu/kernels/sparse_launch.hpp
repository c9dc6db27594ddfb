#pragma once

// Launchers of the sparse layers' kernels (gpu/kernels/sparse.cu; bodies in
// core/kernels/pool2d.hpp, fm.hpp, gather_index.hpp and gpu/kernels/sparse.cuh): each runs
// its body over its index space on `stream` and returns the launch's error. Plain device
// pointers.

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/kernels/pool2d.hpp"
#include "gpu/kernels/sparse.cuh"

namespace troupe::gpu::launch {

cudaError_t pool2d_forward(cudaStream_t s, const core::kernels::Pool2dShape& shape,
                           const core::Pool2dGeometry& g, bool max, const float* x, float* y);
/// dx must be zeroed first (windows add into it).
cudaError_t pool2d_backward(cudaStream_t s, const core::kernels::Pool2dShape& shape,
                            const core::Pool2dGeometry& g, bool max, const float* x, const float* y,
                            const float* dy, float* dx);
cudaError_t fm_forward(cudaStream_t s, const float* x, float* y, int64_t b, int64_t fields,
                       int64_t k);
cudaError_t fm_backward(cudaStream_t s, const float* x, const float* dy, float* dx, int64_t b,
                        int64_t fields, int64_t k);
cudaError_t gather_index(cudaStream_t s, const float* rows, const int32_t* index, float* y,
                         int64_t n, int64_t d);
/// grads must be zeroed first (ids repeat: atomics).
cudaError_t scatter_add_index(cudaStream_t s, const float* dy, const int32_t* index, float* grads,
                              int64_t n, int64_t d);
cudaError_t pad_image(cudaStream_t s, const kernels::PadShape& shape, const float* x,
                      float* padded);
cudaError_t crop_image(cudaStream_t s, const kernels::PadShape& shape, const float* padded,
                       float* x);

}  // namespace troupe::gpu::launch
