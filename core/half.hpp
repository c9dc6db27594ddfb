#pragma once

// bfloat16 and IEEE float16 conversions, round-to-nearest-even, on the host and on a CUDA
// device alike (TROUPE_HD): the CPU reference path and the GPU kernels round the same way.
// NaN stays NaN (quiet), float16 overflow becomes infinity (what loss scaling watches for),
// float16 subnormals are kept, as CUDA's __float2half_rn and __float2bfloat16_rn do.
//
//   uint16_t h = core::float_to_fp16(3.14159f);   // 0x4248
//   float back = core::fp16_to_float(h);           // 3.140625
//   core::round_in_place(buf, n, DType::bfloat16); // each value as bf16 would hold it

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "core/device.hpp"
#include "core/host_device.hpp"

namespace troupe::core {

TROUPE_HD inline uint32_t float_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

TROUPE_HD inline float bits_float(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

TROUPE_HD inline uint16_t float_to_bf16(float f) {
  const uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return static_cast<uint16_t>((u >> 16) | 0x40u);  // NaN: keep sign and top payload, quiet
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

TROUPE_HD inline float bf16_to_float(uint16_t h) {
  return bits_float(static_cast<uint32_t>(h) << 16);
}

TROUPE_HD inline uint16_t float_to_fp16(float f) {
  const uint32_t u = float_bits(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);   // NaN
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520: infinity
  if (a < 0x38800000u) {  // below 2^-14, the smallest normal half: a subnormal or zero
    if (a < 0x33000000u) return static_cast<uint16_t>(sign);  // below 2^-25: zero
    // In units of 2^-24: the 24-bit significand shifted right by 126 - exponent (14..24).
    const uint32_t shift = 126u - (a >> 23);
    const uint32_t m = (a & 0x7fffffu) | 0x800000u;
    uint32_t q = m >> shift;
    const uint32_t rest = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    if (rest > half || (rest == half && (q & 1u))) ++q;
    return static_cast<uint16_t>(sign | q);
  }
  // Normal: exponent rebiased from 127 to 15, 23 mantissa bits rounded to 10 (a carry
  // into the exponent is the right answer).
  const uint32_t r = a - 0x38000000u;
  return static_cast<uint16_t>(sign | ((r + 0xfffu + ((r >> 13) & 1u)) >> 13));
}

TROUPE_HD inline float fp16_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0) {  // zero or subnormal: m * 2^-24, exact in float
    const float v = static_cast<float>(m) * 5.9604644775390625e-8f;
    return bits_float(float_bits(v) | sign);
  }
  if (e == 31) return bits_float(sign | 0x7f800000u | (m << 13));  // infinity, NaN
  return bits_float(sign | ((e + 112u) << 23) | (m << 13));
}

/// float32 rounded to TF32 (8-bit exponent, 10-bit mantissa), round-to-nearest-even, as
/// the tensor cores read a TF32 operand; NaN and infinity unchanged.
TROUPE_HD inline float round_tf32(float f) {
  const uint32_t u = float_bits(f);
  if ((u & 0x7f800000u) == 0x7f800000u) return f;
  return bits_float((u + 0xfffu + ((u >> 13) & 1u)) & ~0x1fffu);
}

/// `f` as an element of type `t` would hold it, back in float32 (float32: unchanged).
TROUPE_HD inline float round_to(float f, DType t) {
  if (t == DType::bfloat16) return bf16_to_float(float_to_bf16(f));
  if (t == DType::float16) return fp16_to_float(float_to_fp16(f));
  return f;
}

/// Converts n float32 values to 16-bit elements of type `t` (bfloat16 or float16).
void to_half(const float* src, uint16_t* dst, size_t n, DType t);
/// Converts n float32 values to bfloat16 fast, for a matrix product's operands and the
/// tensor channel's bf16 frames: by the CPU's AVX512_BF16 instruction where it has one
/// (round to nearest even like to_half, but subnormal inputs become zero, as the
/// instruction makes them), else as to_half.
void to_bf16_fast(const float* src, uint16_t* dst, size_t n);
/// Converts n 16-bit elements of type `t` to float32.
void from_half(const uint16_t* src, float* dst, size_t n, DType t);
/// Rounds n float32 values in place as type `t` holds them (float32: nothing to do).
void round_in_place(float* data, size_t n, DType t);
/// As round_in_place for the operands of a policy's matrix products: also TF32.
void round_operands(float* data, size_t n, Precision p);

}  // namespace troupe::core
