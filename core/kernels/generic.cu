// The CUDA bodies of the generic kernels: the index bodies of core/kernels/generic.hpp in a
// grid-stride loop, on the caller's stream. The CPU's bodies are generic_cpu.cpp, beside
// this file; both run the same functions, so the arithmetic tested on the CPU is this one.
#include <cuda_runtime_api.h>

#include "core/kernels/generic_launch.hpp"

namespace troupe::core::kernels::cuda {

namespace {

template <class Body>
__global__ void each_index(int64_t n, Body body) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    body(i);
}

template <class Body>
int run(void* stream, int64_t n, Body body) {
  if (n <= 0) return 0;
  constexpr int threads = 256;
  const int64_t wanted = (n + threads - 1) / threads;
  const auto blocks = static_cast<unsigned>(wanted < (int64_t{1} << 20) ? wanted : (1 << 20));
  each_index<<<blocks, threads, 0, static_cast<cudaStream_t>(stream)>>>(n, body);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

int elementwise(void* stream, const ElementwiseArgs& a, int64_t n) {
  return run(stream, n, [=] __device__(int64_t i) { elementwise_at(a, i); });
}

int elementwise_grad(void* stream, const ElementwiseGradArgs& a, int64_t n) {
  return run(stream, n, [=] __device__(int64_t i) { elementwise_grad_at(a, i); });
}

int reduce(void* stream, const ReduceArgs& a, int64_t n) {
  return run(stream, n, [=] __device__(int64_t i) { reduce_at(a, i); });
}

int reduce_grad(void* stream, const ReduceGradArgs& a, int64_t n) {
  return run(stream, n, [=] __device__(int64_t i) { reduce_grad_at(a, i); });
}

int copy(void* stream, const CopyArgs& a, int64_t n) {
  return run(stream, n, [=] __device__(int64_t i) { copy_at(a, i); });
}

int gather(void* stream, const GatherArgs& a, int64_t n) {
  return run(stream, n, [=] __device__(int64_t i) { gather_at(a, i); });
}

int scatter(void* stream, const GatherArgs& a, const float* dy, float* dx, bool accumulate,
            int64_t n) {
  return run(stream, n, [=] __device__(int64_t i) { scatter_at(a, dy, dx, accumulate, i); });
}

}  // namespace troupe::core::kernels::cuda
