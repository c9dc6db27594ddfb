#pragma once

// What the kernel bodies (gpu/kernels/*.cuh) share: atomics that are CUDA's on a device and
// plain additions on the host. The bodies are TROUPE_HD functions of one index: the .cu
// files run them in grid-stride loops, and tests/gpu/test_kernel_bodies.cpp runs the very
// same functions over every index on the CPU against the CPU backend, so their arithmetic
// is checked on machines without a GPU. Nothing here includes a CUDA header.

#include <cmath>
#include <cstdint>

#include "core/host_device.hpp"

namespace troupe::gpu::kernels {

TROUPE_HD inline bool finite(float x) {
#if defined(__CUDA_ARCH__)
  return isfinite(x);
#else
  return std::isfinite(x);
#endif
}

#if defined(__CUDA_ARCH__)
__device__ inline void atomic_add(float* p, float v) {
  atomicAdd(p, v);
}
__device__ inline void atomic_add(double* p, double v) {
  atomicAdd(p, v);
}
__device__ inline void atomic_add(unsigned long long* p, unsigned long long v) {
  atomicAdd(p, v);
}
#else
inline void atomic_add(float* p, float v) {
  *p += v;
}
inline void atomic_add(double* p, double v) {
  *p += v;
}
inline void atomic_add(unsigned long long* p, unsigned long long v) {
  *p += v;
}
#endif

/// Column reductions (bias and normalization gradients, batch moments) split each column
/// over this many row lanes, lane l taking rows l, l + kColumnLanes, ..., whose partial sums
/// are added in a tree: on the GPU each lane is a thread of a block that owns 32 columns
/// (gpu/kernels/columns.cuh), so a tall matrix is read by a thousand threads rather than by
/// one thread per column down all its rows, and the rounding stays close to the CPU's
/// pairwise sums. A tall and narrow matrix (a Conv2D's N*H*W rows of a few channels) is
/// also cut into chunks of rows, each reduced by blocks of its own, whose sums are then
/// added in order. column_lane_sums adds in the same order on the host: plain sums match
/// the device's bit for bit; a term with a product may round differently where one
/// compiler fuses the multiply-add and the other does not (nvcc does by default).
constexpr int kColumnLanes = 32;

/// Rows per chunk: about 256 blocks in all where the rows allow it, at least 2048 rows (64
/// a lane) in a chunk; all the rows (one chunk) for a wide or a short matrix.
TROUPE_HD inline int64_t column_chunk_rows(int64_t rows, int64_t cols) {
  const int64_t tiles = (cols + 31) / 32;
  int64_t chunks = 256 / (tiles > 0 ? tiles : 1);
  if (chunks > rows / 2048) chunks = rows / 2048;
  if (chunks < 1) chunks = 1;
  return (rows + chunks - 1) / chunks;
}

/// Lane `lane`'s partial sums over rows [begin, end): term(row, acc) adds the row's K terms
/// into acc.
template <int K, class Term>
TROUPE_HD inline void lane_sums(int lane, int64_t begin, int64_t end, const Term& term,
                                float (&acc)[K]) {
  for (int k = 0; k < K; ++k)
    acc[k] = 0.0f;
  for (int64_t r = begin + lane; r < end; r += kColumnLanes)
    term(r, acc);
}

/// K sums in lanes, part[l * K + k] for lane l, folded into part[0..K): at each step the
/// upper half of the lanes onto the lower half, as the device kernel folds them.
template <int K>
TROUPE_HD inline void fold_lanes(float* part) {
  for (int half = kColumnLanes / 2; half > 0; half /= 2)
    for (int l = 0; l < half; ++l)
      for (int k = 0; k < K; ++k)
        part[l * K + k] += part[(l + half) * K + k];
}

/// Column j's K sums over the rows of a [rows, cols] matrix: make_term(j) gives the
/// column's term(row, acc).
template <int K, class MakeTerm>
TROUPE_HD inline void column_lane_sums(int64_t j, int64_t rows, int64_t cols,
                                       const MakeTerm& make_term, float (&out)[K]) {
  const auto term = make_term(j);
  const int64_t chunk = column_chunk_rows(rows, cols);
  for (int k = 0; k < K; ++k)
    out[k] = 0.0f;
  for (int64_t begin = 0; begin < rows || begin == 0; begin += chunk) {
    const int64_t end = begin + chunk < rows ? begin + chunk : rows;
    float part[kColumnLanes * K];
    for (int l = 0; l < kColumnLanes; ++l) {
      float acc[K];
      lane_sums<K>(l, begin, end, term, acc);
      for (int k = 0; k < K; ++k)
        part[l * K + k] = acc[k];
    }
    fold_lanes<K>(part);
    for (int k = 0; k < K; ++k)
      out[k] += part[k];
    if (chunk <= 0) break;
  }
}

}  // namespace troupe::gpu::kernels
