#pragma once

// Every CUDA and NCCL call goes through one of these: a failure becomes an error value
// naming the call, file:line and the library's own message; nothing aborts.
//
//   TROUPE_CUDA_CHECK(cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice));  // returns on failure

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <string>

#include "core/expected.hpp"

namespace troupe::gpu::detail {

inline core::Error cuda_error(cudaError_t e, const char* call, const char* file, int line) {
  return core::Error{core::Errc::unavailable, std::string(call) + " failed at " + file + ":" +
                                                  std::to_string(line) + ": " +
                                                  cudaGetErrorString(e)};
}

inline core::Error nccl_error(ncclResult_t r, const char* call, const char* file, int line) {
  return core::Error{core::Errc::unavailable, std::string(call) + " failed at " + file + ":" +
                                                  std::to_string(line) + ": " +
                                                  ncclGetErrorString(r)};
}

}  // namespace troupe::gpu::detail

#define TROUPE_CUDA_CHECK(call)                                                            \
  do {                                                                                     \
    const cudaError_t troupe_cuda_e_ = (call);                                             \
    if (troupe_cuda_e_ != cudaSuccess)                                                     \
      return ::troupe::gpu::detail::cuda_error(troupe_cuda_e_, #call, __FILE__, __LINE__); \
  } while (0)

#define TROUPE_NCCL_CHECK(call)                                                            \
  do {                                                                                     \
    const ncclResult_t troupe_nccl_r_ = (call);                                            \
    if (troupe_nccl_r_ != ncclSuccess)                                                     \
      return ::troupe::gpu::detail::nccl_error(troupe_nccl_r_, #call, __FILE__, __LINE__); \
  } while (0)
