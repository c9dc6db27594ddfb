#pragma once

// Adding into memory that other threads of a CUDA kernel may add into too: CUDA's atomicAdd
// on a device, a plain addition on the host (where each caller owns what it adds into).
// For the kernel bodies of core/kernels/ that scatter (pooling's and the embeddings'
// backward passes).

#include "core/host_device.hpp"

namespace troupe::core::kernels {

TROUPE_HD inline void atomic_add(float* p, float v) {
#if defined(__CUDA_ARCH__)
  atomicAdd(p, v);
#else
  *p += v;
#endif
}

}  // namespace troupe::core::kernels
