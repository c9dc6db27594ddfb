#pragma once

// The CUDA backend's private parts that more than one of its files needs.

#include <map>
#include <tuple>

#include "gpu/cuda_backend.hpp"

namespace troupe::gpu {

// Two staging buffers of this size alternate, so a copy fills one while the other's DMA
// runs.
constexpr size_t kStagingBytes = size_t{8} << 20;
// cuBLASLt's workspace (split-K and the like).
constexpr size_t kWorkspaceBytes = size_t{32} << 20;

struct CudaBackend::Staging {
  void* buffer[2] = {nullptr, nullptr};
  cudaEvent_t done[2] = {nullptr, nullptr};  // the DMA out of / into buffer[i] has ended
  int next = 0;
};

struct CudaBackend::GemmCache {
  struct Entry {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
    bool has_bias = false;
  };
  // transpose_a, transpose_b, m, n, k, lda, ldb, ldc, bias, precision
  using Key =
      std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool, int>;
  std::map<Key, Entry> entries;
  void* workspace = nullptr;

  ~GemmCache() {
    for (auto& [key, e] : entries) {
      cublasLtMatrixLayoutDestroy(e.a);
      cublasLtMatrixLayoutDestroy(e.b);
      cublasLtMatrixLayoutDestroy(e.c);
      cublasLtMatmulDescDestroy(e.op);
    }
    if (workspace != nullptr) cudaFree(workspace);
  }
};

}  // namespace troupe::gpu
