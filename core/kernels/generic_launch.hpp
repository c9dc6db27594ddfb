#pragma once

// The CUDA bodies of the generic kernels (core/kernels/generic.cu, built into gpu/ when
// CUDA is): each runs its index body of core/kernels/generic.hpp over its index space on
// `stream` (a cudaStream_t) and returns the launch's cudaError_t as an int (0: none). No CUDA
// header, so the backend that calls them and the CPU's bodies read alike.

#include <cstdint>

#include "core/kernels/generic.hpp"

namespace troupe::core::kernels::cuda {

int elementwise(void* stream, const ElementwiseArgs& a, int64_t n);
int elementwise_grad(void* stream, const ElementwiseGradArgs& a, int64_t n);
int reduce(void* stream, const ReduceArgs& a, int64_t n);
int reduce_grad(void* stream, const ReduceGradArgs& a, int64_t n);
int copy(void* stream, const CopyArgs& a, int64_t n);
int gather(void* stream, const GatherArgs& a, int64_t n);
int scatter(void* stream, const GatherArgs& a, const float* dy, float* dx, bool accumulate,
            int64_t n);

}  // namespace troupe::core::kernels::cuda
