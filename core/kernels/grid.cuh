#pragma once

// One grid-stride loop for every CUDA kernel of the project (gpu/kernels/*.cu and the
// generic kernels' core/kernels/generic.cu): `body(i)` for i in [0, n), 256 threads a block.
// Included only by .cu files, which gpu/ builds.

#include <cuda_runtime_api.h>

#include <cstdint>

namespace troupe::core::kernels::grid {

template <class Body>
__global__ void for_each_index(int64_t n, Body body) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    body(i);
}

template <class Body>
cudaError_t run(cudaStream_t s, int64_t n, Body body) {
  if (n <= 0) return cudaSuccess;
  constexpr int threads = 256;
  const int64_t wanted = (n + threads - 1) / threads;
  const auto blocks = static_cast<unsigned>(wanted < (int64_t{1} << 20) ? wanted : (1 << 20));
  for_each_index<<<blocks, threads, 0, s>>>(n, body);
  return cudaGetLastError();
}

}  // namespace troupe::core::kernels::grid
