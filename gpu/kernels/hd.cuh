#pragma once

// What the kernel bodies (gpu/kernels/*.cuh) share: atomics that are CUDA's on a device and
// plain additions on the host. The bodies are TROUPE_HD functions of one index: the .cu
// files run them in grid-stride loops, and tests/gpu/test_kernel_bodies.cpp runs the very
// same functions over every index on the CPU against the CPU backend, so their arithmetic
// is checked on machines without a GPU. Nothing here includes a CUDA header.

#include <cmath>
#include <cstdint>

#include "core/host_device.hpp"

namespace troupe::gpu::kernels {

TROUPE_HD inline bool finite(float x) {
#if defined(__CUDA_ARCH__)
  return isfinite(x);
#else
  return std::isfinite(x);
#endif
}

#if defined(__CUDA_ARCH__)
__device__ inline void atomic_add(float* p, float v) {
  atomicAdd(p, v);
}
__device__ inline void atomic_add(double* p, double v) {
  atomicAdd(p, v);
}
__device__ inline void atomic_add(unsigned long long* p, unsigned long long v) {
  atomicAdd(p, v);
}
#else
inline void atomic_add(float* p, float v) {
  *p += v;
}
inline void atomic_add(double* p, double v) {
  *p += v;
}
inline void atomic_add(unsigned long long* p, unsigned long long v) {
  *p += v;
}
#endif

}  // namespace troupe::gpu::kernels
