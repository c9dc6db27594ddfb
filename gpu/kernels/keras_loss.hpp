#pragma once

// Launchers of the compile() losses' bodies (core/kernels/loss.hpp) on a stream: each adds
// the sum of its elements' or rows' losses into *loss_sum (a device double the caller
// zeroed) and writes the gradient. The CUDA backend's loss() (gpu/cuda_loss.cpp) calls them.

#include <cuda_runtime_api.h>

#include <cstdint>

namespace troupe::gpu::launch {

/// Binary cross-entropy of probabilities (bce) or squared error, element by element over n.
cudaError_t keras_loss_elements(cudaStream_t s, bool bce, const float* pred, const float* labels,
                                float* grad, double* loss_sum, int64_t n, float scale);
/// Categorical cross-entropy of `rows` rows of c predictions (probabilities, or logits),
/// against label vectors (labels) or class indices (classes, when labels is null).
cudaError_t keras_loss_rows(cudaStream_t s, const float* pred, const float* labels,
                            const int32_t* classes, float* grad, double* loss_sum, int64_t rows,
                            int64_t c, bool logits, float scale);

}  // namespace troupe::gpu::launch
