// The CUDA bodies of the generic kernels: the index bodies of core/kernels/generic.hpp in a
// grid-stride loop, on the caller's stream. The CPU's bodies are generic_cpu.cpp, beside
// this file; both run the same functions, so the arithmetic tested on the CPU is this one.
#include <cuda_runtime_api.h>

#include "core/kernels/generic_launch.hpp"
#include "core/kernels/grid.cuh"

namespace troupe::core::kernels::cuda {

namespace {

// The project's grid-stride loop (core/kernels/grid.cuh) on the caller's stream, its error
// as an int.
template <class Body>
int run(void* stream, int64_t n, Body body) {
  return static_cast<int>(grid::run(static_cast<cudaStream_t>(stream), n, body));
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
