#pragma once

// The CPU's matrix products on oneDNN's matmul (Debian's libdnnl-dev), where the build has
// it: oneDNN picks its kernels at run time for the CPU it finds (brgemm on AVX-512, dot
// products of AVX512_BF16 for bfloat16 operands), and accumulates in float32 either way.
// Split over the intra-op threads (core/parallel.hpp) by oneDNN's own OpenMP team, sized
// to intra_op_threads() on every call. Without oneDNN the callers keep Eigen
// (core/cpu/matmul.cpp).

#include <cstdint>
#include <string>

#include "core/device.hpp"

namespace troupe::core::cpu {

/// A row-major matrix operand (float32 values, or bfloat16 bits), read as stored or
/// transposed.
struct GemmOperand {
  const void* data = nullptr;
  int64_t ld = 0;  // elements between the starts of consecutive stored rows
  bool transposed = false;
};

/// c[m, n] = op(a)[m, k] op(b)[k, n] (+ bias[n] on every row) (+ c itself when accumulating).
struct Gemm {
  int64_t m = 0, n = 0, k = 0;
  GemmOperand a, b;
  float* c = nullptr;
  int64_t ldc = 0;
  const float* bias = nullptr;
  bool accumulate = false;
  bool relu = false;            // c = max(c, 0) last (a post-op of the product)
  DType type = DType::float32;  // of a and b: float32 or bfloat16
};

/// Whether gemm() computes products of `type` here: oneDNN is built in (and not turned off
/// by set_gemm_enabled), and for bfloat16 the CPU has AVX512_BF16 (core/cpu_features.hpp;
/// not masked).
bool gemm_supports(DType type);
/// Turns oneDNN off (the callers fall back to Eigen) or on again, for this process: how a
/// benchmark or a test compares the two in one run.
void set_gemm_enabled(bool enabled);
/// Computes `g`. False when it could not (gemm_supports says no, or oneDNN declined the
/// shape): the caller computes it another way.
bool gemm(const Gemm& g);
/// What computes `type`'s products: "onednn:<oneDNN's kernel>" once one ran, "onednn"
/// before, "" when gemm_supports(type) is false.
std::string gemm_engine(DType type);

}  // namespace troupe::core::cpu
