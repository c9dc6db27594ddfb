#include "core/half.hpp"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "core/assert.hpp"
#include "core/cpu_features.hpp"

namespace troupe::core {

void to_half(const float* src, uint16_t* dst, size_t n, DType t) {
  TROUPE_ASSERT(t == DType::bfloat16 || t == DType::float16, "to_half: a 16-bit float type");
  if (t == DType::bfloat16) {
    for (size_t i = 0; i < n; ++i)
      dst[i] = float_to_bf16(src[i]);
  } else {
    for (size_t i = 0; i < n; ++i)
      dst[i] = float_to_fp16(src[i]);
  }
}

void from_half(const uint16_t* src, float* dst, size_t n, DType t) {
  TROUPE_ASSERT(t == DType::bfloat16 || t == DType::float16, "from_half: a 16-bit float type");
  if (t == DType::bfloat16) {
    for (size_t i = 0; i < n; ++i)
      dst[i] = bf16_to_float(src[i]);
  } else {
    for (size_t i = 0; i < n; ++i)
      dst[i] = fp16_to_float(src[i]);
  }
}

#if defined(__x86_64__)
namespace {

// 16 values per instruction, the tail under a mask; called only where the CPU has it.
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) void to_bf16_avx512(
    const float* src, uint16_t* dst, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256bh h = _mm512_cvtneps_pbh(_mm512_loadu_ps(src + i));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), reinterpret_cast<const __m256i&>(h));
  }
  if (i < n) {
    const auto mask = static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m256bh h = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(mask, src + i));
    _mm256_mask_storeu_epi16(dst + i, mask, reinterpret_cast<const __m256i&>(h));
  }
}

}  // namespace
#endif

void to_bf16_fast(const float* src, uint16_t* dst, size_t n) {
#if defined(__x86_64__)
  if (cpu_has(CpuFeature::avx512_bf16)) return to_bf16_avx512(src, dst, n);
#endif
  to_half(src, dst, n, DType::bfloat16);
}

void round_in_place(float* data, size_t n, DType t) {
  if (t == DType::bfloat16) {
    for (size_t i = 0; i < n; ++i)
      data[i] = bf16_to_float(float_to_bf16(data[i]));
  } else if (t == DType::float16) {
    size_t i = 0;
#if defined(__AVX512F__)
    // The CPU's own conversion, 16 at a time: round-to-nearest-even like the scalar one
    // (tests/core/test_half.cpp compares them on every float16 and 17M float32 values).
    for (; i + 16 <= n; i += 16) {
      const __m256i h =
          _mm512_cvtps_ph(_mm512_loadu_ps(data + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      _mm512_storeu_ps(data + i, _mm512_cvtph_ps(h));
    }
#endif
    for (; i < n; ++i)
      data[i] = fp16_to_float(float_to_fp16(data[i]));
  }
}

void round_operands(float* data, size_t n, Precision p) {
  if (p == Precision::tf32) {
    for (size_t i = 0; i < n; ++i)
      data[i] = round_tf32(data[i]);
    return;
  }
  round_in_place(data, n, compute_dtype(p));
}

}  // namespace troupe::core
