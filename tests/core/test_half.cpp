// bfloat16 and float16 conversions: exact on every float16 value, round-to-nearest-even,
// and equal to this CPU's own conversion instructions where it has them (F16C,
// AVX512_BF16), on a large sample of float32 values.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "core/cpu_features.hpp"
#include "core/half.hpp"

using namespace troupe::core;

TEST_CASE("float16 conversions round to nearest even, overflow to infinity, keep subnormals",
          "[half]") {
  CHECK(float_to_fp16(1.0f) == 0x3c00);
  CHECK(float_to_fp16(-2.0f) == 0xc000);
  CHECK(float_to_fp16(65504.0f) == 0x7bff);  // the largest float16
  CHECK(float_to_fp16(65519.0f) == 0x7bff);  // rounds down to it
  CHECK(float_to_fp16(65520.0f) == 0x7c00);  // the tie goes to even: infinity
  CHECK(float_to_fp16(1e10f) == 0x7c00);
  CHECK(float_to_fp16(-1e10f) == 0xfc00);
  CHECK(float_to_fp16(std::ldexp(1.0f, -24)) == 0x0001);  // the smallest subnormal
  CHECK(float_to_fp16(std::ldexp(1.0f, -25)) == 0x0000);  // half of it: ties to even, 0
  CHECK(float_to_fp16(std::ldexp(1.5f, -25)) == 0x0001);
  CHECK(float_to_fp16(1.0f + std::ldexp(1.0f, -11)) == 0x3c00);      // tie, to even
  CHECK(float_to_fp16(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3c02);  // tie, to even (up)
  const uint16_t nan = float_to_fp16(std::numeric_limits<float>::quiet_NaN());
  CHECK((nan & 0x7c00) == 0x7c00);
  CHECK((nan & 0x03ff) != 0);
  CHECK(std::isnan(fp16_to_float(nan)));
  CHECK(std::isinf(fp16_to_float(0x7c00)));

  // Every finite float16 survives the trip through float32 bit for bit.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = fp16_to_float(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    if (float_to_fp16(f) != h) FAIL("float16 " << h << " came back as " << float_to_fp16(f));
  }
}

TEST_CASE("bfloat16 conversions round to nearest even and keep NaN", "[half]") {
  CHECK(float_to_bf16(1.0f) == 0x3f80);
  CHECK(bf16_to_float(0x3f80) == 1.0f);
  CHECK(float_to_bf16(1.0f + std::ldexp(1.0f, -8)) == 0x3f80);      // tie, to even
  CHECK(float_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)) == 0x3f82);  // tie, to even (up)
  CHECK(float_to_bf16(1.0f + std::ldexp(1.0f, -7)) == 0x3f81);      // exact
  CHECK(float_to_bf16(3.0e38f) == 0x7f62);
  CHECK(float_to_bf16(std::numeric_limits<float>::max()) == 0x7f80);  // rounds up: infinity
  CHECK(std::isnan(bf16_to_float(float_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  CHECK(std::isnan(bf16_to_float(float_to_bf16(-std::numeric_limits<float>::quiet_NaN()))));
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = bf16_to_float(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    if (float_to_bf16(f) != h) FAIL("bfloat16 " << h << " came back as " << float_to_bf16(f));
  }
  CHECK(round_tf32(1.0f + std::ldexp(1.0f, -11)) == 1.0f);  // tie, to even
  CHECK(round_tf32(1.0f + std::ldexp(1.0f, -10)) == 1.0f + std::ldexp(1.0f, -10));
  CHECK(round_to(1.0f + std::ldexp(1.0f, -9), DType::bfloat16) == 1.0f);
  CHECK(round_to(1.0f + std::ldexp(1.0f, -9), DType::float32) == 1.0f + std::ldexp(1.0f, -9));
}

#if defined(__x86_64__) && defined(__F16C__)
TEST_CASE("float16 conversions agree with the CPU's F16C instructions", "[half]") {
  if (!cpu_has(CpuFeature::f16c)) {
    WARN("no F16C on this CPU: the hardware comparison is skipped");
    return;
  }
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float a = fp16_to_float(static_cast<uint16_t>(h)),
                b = _cvtsh_ss(static_cast<uint16_t>(h));
    if (std::isnan(a) && std::isnan(b)) continue;
    if (std::memcmp(&a, &b, sizeof a) != 0) FAIL("float16 " << h << ": " << a << " vs " << b);
  }
  int64_t checked = 0;
  for (uint64_t u = 0; u < (uint64_t{1} << 32); u += 251) {
    const float f = bits_float(static_cast<uint32_t>(u));
    if (std::isnan(f)) continue;
    const uint16_t ours = float_to_fp16(f);
    const uint16_t theirs = _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    if (ours != theirs) FAIL("float " << u << ": " << ours << " vs F16C " << theirs);
    ++checked;
  }
  CHECK(checked > 17000000);
}
#endif

#if defined(__x86_64__) && defined(__AVX512BF16__) && defined(__AVX512VL__)
TEST_CASE("bfloat16 conversions agree with the CPU's AVX512_BF16 instruction", "[half]") {
  if (!cpu_has(CpuFeature::avx512_bf16)) {
    WARN("no AVX512_BF16 on this CPU: the hardware comparison is skipped");
    return;
  }
  int64_t checked = 0;
  for (uint64_t u = 0; u < (uint64_t{1} << 32); u += 251) {
    const float f = bits_float(static_cast<uint32_t>(u));
    // The instruction flushes subnormal inputs to zero; CUDA's conversion and ours keep them.
    if (std::isnan(f) || std::fpclassify(f) == FP_SUBNORMAL) continue;
    const __m128bh r = _mm_cvtneps_pbh(_mm_set1_ps(f));
    uint16_t theirs;
    std::memcpy(&theirs, &r, sizeof theirs);
    if (float_to_bf16(f) != theirs)
      FAIL("float " << u << ": " << float_to_bf16(f) << " vs " << theirs);
    ++checked;
  }
  CHECK(checked > 15000000);
}
#endif

TEST_CASE("bulk conversions and rounding in place", "[half]") {
  const std::vector<float> in{0.1f, -3.3f, 70000.0f, 1e-8f};
  std::vector<uint16_t> h(in.size());
  std::vector<float> back(in.size());
  to_half(in.data(), h.data(), in.size(), DType::float16);
  from_half(h.data(), back.data(), in.size(), DType::float16);
  CHECK(back[0] == fp16_to_float(float_to_fp16(0.1f)));
  CHECK(std::isinf(back[2]));
  std::vector<float> r = in;
  round_in_place(r.data(), r.size(), DType::bfloat16);
  for (size_t i = 0; i < in.size(); ++i)
    CHECK(r[i] == bf16_to_float(float_to_bf16(in[i])));
  std::vector<float> same = in;
  round_operands(same.data(), same.size(), Precision::float32);
  CHECK(same == in);
  // In place in bulk (vectorized where the CPU can) as one value at a time, NaN aside.
  std::vector<float> many(100003);
  for (size_t i = 0; i < many.size(); ++i)
    many[i] = bits_float(static_cast<uint32_t>(i * 2654435761u));
  for (DType t : {DType::float16, DType::bfloat16}) {
    std::vector<float> bulk = many;
    round_in_place(bulk.data(), bulk.size(), t);
    for (size_t i = 0; i < many.size(); ++i) {
      const float one = round_to(many[i], t);
      if (std::isnan(one) ? !std::isnan(bulk[i]) : bulk[i] != one)
        FAIL(dtype_name(t) << " element " << i << ": " << bulk[i] << " vs " << one);
    }
  }
}
