#pragma once

// An embedding call's rows by index (Backend::gather_index, scatter_add_index): element i
// of y [n, d] is element i % d of row index[i / d] of rows [u, d]; the backward pass adds
// dy's rows into the gradients of the rows they came from. Written once for the CPU
// backend (core/cpu/sparse_kernels.cpp) and the CUDA one (gpu/kernels/sparse.cuh; there
// with atomics, ids repeat). TROUPE_HD, no CUDA header.

#include <cstdint>

#include "core/host_device.hpp"
#include "core/kernels/atomic_add.hpp"

namespace troupe::core::kernels {

TROUPE_HD inline void gather_index(int64_t i, int64_t d, const float* rows, const int32_t* index,
                                   float* y) {
  y[i] = rows[static_cast<int64_t>(index[i / d]) * d + i % d];
}

/// Adds element i of dy [n, d] into grads [u, d] (zeroed by the caller).
TROUPE_HD inline void scatter_add_index(int64_t i, int64_t d, const float* dy, const int32_t* index,
                                        float* grads) {
  atomic_add(grads + static_cast<int64_t>(index[i / d]) * d + i % d, dy[i]);
}

}  // namespace troupe::core::kernels
