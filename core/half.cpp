#include "core/half.hpp"

#include "core/assert.hpp"

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

void round_in_place(float* data, size_t n, DType t) {
  if (t == DType::bfloat16) {
    for (size_t i = 0; i < n; ++i)
      data[i] = bf16_to_float(float_to_bf16(data[i]));
  } else if (t == DType::float16) {
    for (size_t i = 0; i < n; ++i)
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
