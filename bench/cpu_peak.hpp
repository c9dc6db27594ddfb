#pragma once

// This core's peak multiply-add throughput, measured: independent chains of AVX-512 FMAs
// (float32: 16 lanes x 2 FLOP each), of AVX2 FMAs where there is no AVX-512 (8 lanes; 12
// chains, which leave the two operands in the 16 ymm registers), and of AVX512_BF16 dot
// products (vdpbf16ps: 16 lanes x 2 bf16 pairs x 2 FLOP each), enough chains to hide the
// instructions' latency. The figure a kernel's efficiency is quoted against
// (bench_train_step --peak).

#include <algorithm>
#include <chrono>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace troupe::bench {

namespace detail {

constexpr int chains = 16;

#if defined(__x86_64__)
__attribute__((target("avx512f"), noinline)) inline float fma_loop(long iterations) {
  __m512 acc[chains];
  for (int c = 0; c < chains; ++c)
    acc[c] = _mm512_set1_ps(0.001f * static_cast<float>(c));
  const __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(0.0001f);
  for (long i = 0; i < iterations; ++i)
#pragma GCC unroll 16
    for (int c = 0; c < chains; ++c)
      acc[c] = _mm512_fmadd_ps(acc[c], a, b);
  __m512 s = acc[0];
  for (int c = 1; c < chains; ++c)
    s = _mm512_add_ps(s, acc[c]);
  return _mm512_reduce_add_ps(s);
}

constexpr int chains_avx2 = 12;

__attribute__((target("avx2,fma"), noinline)) inline float fma256_loop(long iterations) {
  __m256 acc[chains_avx2];
  for (int c = 0; c < chains_avx2; ++c)
    acc[c] = _mm256_set1_ps(0.001f * static_cast<float>(c));
  const __m256 a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(0.0001f);
  for (long i = 0; i < iterations; ++i)
#pragma GCC unroll 12
    for (int c = 0; c < chains_avx2; ++c)
      acc[c] = _mm256_fmadd_ps(acc[c], a, b);
  __m256 s = acc[0];
  for (int c = 1; c < chains_avx2; ++c)
    s = _mm256_add_ps(s, acc[c]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, s);
  float sum = 0.0f;
  for (float v : lanes)
    sum += v;
  return sum;
}

__attribute__((target("avx512f,avx512bf16"), noinline)) inline float dpbf16_loop(long iterations) {
  __m512 acc[chains];
  for (int c = 0; c < chains; ++c)
    acc[c] = _mm512_set1_ps(0.001f * static_cast<float>(c));
  const __m512bh a = _mm512_cvtne2ps_pbh(_mm512_set1_ps(0.5f), _mm512_set1_ps(0.25f));
  const __m512bh b = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-4f), _mm512_set1_ps(-1e-4f));
  for (long i = 0; i < iterations; ++i)
#pragma GCC unroll 16
    for (int c = 0; c < chains; ++c)
      acc[c] = _mm512_dpbf16_ps(acc[c], a, b);
  __m512 s = acc[0];
  for (int c = 1; c < chains; ++c)
    s = _mm512_add_ps(s, acc[c]);
  return _mm512_reduce_add_ps(s);
}
#endif

}  // namespace detail

/// GFLOP/s of one thread running `loop` for about `seconds`; 0 when not measurable here.
template <class Loop>
double peak_gflops(Loop loop, double flop_per_iteration, double seconds) {
  using clock = std::chrono::steady_clock;
  volatile float sink = 0.0f;
  long n = 1 << 16;
  sink = sink + loop(n);  // warm-up: the clock ramps, the code is paged in
  double best = 0.0;
  const auto end = clock::now() + std::chrono::duration<double>(seconds);
  while (clock::now() < end) {
    const auto t0 = clock::now();
    sink = sink + loop(n);
    const double s = std::chrono::duration<double>(clock::now() - t0).count();
    if (s < 0.01) {
      n *= 2;
      continue;
    }
    best = std::max(best, flop_per_iteration * static_cast<double>(n) / s / 1e9);
  }
  return best;
}

/// float32 FMA peak of one core, GFLOP/s: AVX-512's, else AVX2's (0 with neither).
inline double peak_f32_gflops(bool has_avx512, bool has_avx2, double seconds = 0.3) {
#if defined(__x86_64__)
  if (has_avx512) return peak_gflops(detail::fma_loop, detail::chains * 16 * 2.0, seconds);
  if (has_avx2 && __builtin_cpu_supports("fma"))
    return peak_gflops(detail::fma256_loop, detail::chains_avx2 * 8 * 2.0, seconds);
#endif
  (void)has_avx512;
  (void)has_avx2;
  (void)seconds;
  return 0.0;
}

/// bfloat16 dot-product peak of one core, GFLOP/s (0 without AVX512_BF16).
inline double peak_bf16_gflops(bool has_bf16, double seconds = 0.3) {
#if defined(__x86_64__)
  if (has_bf16) return peak_gflops(detail::dpbf16_loop, detail::chains * 32 * 2.0, seconds);
#endif
  (void)has_bf16;
  (void)seconds;
  return 0.0;
}

}  // namespace troupe::bench
