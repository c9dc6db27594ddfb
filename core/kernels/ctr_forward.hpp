#pragma once

// The per-example arithmetic of the CTR models' embedding part (core::CtrArgs), written
// once for the CPU backend (core/cpu/ctr.cpp, examples split over intra-op threads) and
// the CUDA one (gpu/kernels/ctr.cuh, one thread per example): TROUPE_HD, no CUDA header.

#include <cstdint>

#include "core/host_device.hpp"

namespace troupe::core::kernels {

struct CtrShape {
  int64_t n = 0, fields = 0, dim = 0, dense = 0, width = 1;
  bool fm = false;
};

/// Example i: e_f = v[id_f] x_f into dnn_in (then the dense features), their sum, and the
/// logit's linear and FM terms (the MLP's output is added afterwards).
TROUPE_HD inline void ctr_forward(int64_t i, const CtrShape& s, const float* values,
                                  const int32_t* index, const float* rows, const float* features,
                                  const float* bias, const float* dense_w, float* dnn_in,
                                  float* sum, float* logits) {
  const int64_t F = s.fields, k = s.dim, D = s.dense, W = s.width;
  const bool emb = W > 1;
  const int64_t stride = F * k + D;
  float logit = bias[0];
  float* e = emb ? dnn_in + i * stride : nullptr;
  float* sm = emb ? sum + i * k : nullptr;
  if (emb)
    for (int64_t j = 0; j < k; ++j)
      sm[j] = 0.0f;
  // The squares' sum in `lanes` partial sums: one running sum would make every multiply
  // wait for the add before it (the CPU's loop would be bound by the add's latency, not
  // its throughput: a tenth of a 400-wide DeepFM step went there).
  constexpr int64_t lanes = 16;
  float squares_by_lane[lanes] = {};
  for (int64_t f = 0; f < F; ++f) {
    const int64_t at = i * F + f;
    const float x = values[at];
    const float* row = rows + static_cast<int64_t>(index[at]) * W;
#if !defined(__CUDA_ARCH__)
    // The rows are gathered from a table larger than the cache: ask for one a few fields
    // ahead (the next example's first ones at the end), so the loads overlap.
    constexpr int64_t distance = 32;
    if (at + distance < s.n * F) {
      const float* ahead = rows + static_cast<int64_t>(index[at + distance]) * W;
      __builtin_prefetch(ahead);
      __builtin_prefetch(ahead + W - 1);
    }
#endif
    logit += row[0] * x;
    if (!emb) continue;
    float* ef = e + f * k;
    for (int64_t j0 = 0; j0 < k; j0 += lanes) {
      const int64_t m = k - j0 < lanes ? k - j0 : lanes;
      for (int64_t j = 0; j < m; ++j) {
        const float v = row[1 + j0 + j] * x;
        ef[j0 + j] = v;
        sm[j0 + j] += v;
        squares_by_lane[j] += v * v;
      }
    }
  }
  float squares = 0.0f;
  for (int64_t j = 0; j < lanes; ++j)
    squares += squares_by_lane[j];
  if (D > 0) {
    const float* d = features + i * D;
    for (int64_t j = 0; j < D; ++j) {
      logit += d[j] * dense_w[j];
      if (emb) e[F * k + j] = d[j];
    }
  }
  if (s.fm) {
    float sq_sum = 0.0f;
    for (int64_t j = 0; j < k; ++j)
      sq_sum += sm[j] * sm[j];
    logit += 0.5f * (sq_sum - squares);
  }
  logits[i] = logit;
}

}  // namespace troupe::core::kernels
