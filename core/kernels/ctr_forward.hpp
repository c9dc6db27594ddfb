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
  float squares = 0.0f;
  for (int64_t f = 0; f < F; ++f) {
    const int64_t at = i * F + f;
    const float x = values[at];
    const float* row = rows + static_cast<int64_t>(index[at]) * W;
    logit += row[0] * x;
    if (!emb) continue;
    float* ef = e + f * k;
    for (int64_t j = 0; j < k; ++j) {
      ef[j] = row[1 + j] * x;
      sm[j] += ef[j];
      squares += ef[j] * ef[j];
    }
  }
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
