#pragma once

// Bodies of the CTR models' embedding kernels (core::CtrArgs): the forward one example at
// a time (core/kernels/ctr_forward.hpp, shared with the CPU backend), the backward one
// (example, field) at a time, adding into the rows with atomics (rows are shared between
// examples).

#include "core/kernels/ctr_forward.hpp"
#include "gpu/kernels/hd.cuh"

namespace troupe::gpu::kernels {

using core::kernels::ctr_forward;
using core::kernels::CtrShape;

/// Example i's field f (t = i * F + f): its gradient added into the row it used.
TROUPE_HD inline void ctr_backward(int64_t t, const CtrShape& s, const float* values,
                                   const int32_t* index, const float* dnn_in, const float* sum,
                                   const float* dlogits, const float* ddnn_in, float* row_grads) {
  const int64_t F = s.fields, k = s.dim, D = s.dense, W = s.width;
  const int64_t i = t / F, f = t % F;
  const int64_t stride = F * k + D;
  const float g = dlogits[i], x = values[t];
  float* grow = row_grads + static_cast<int64_t>(index[t]) * W;
  atomic_add(grow, g * x);
  if (W == 1) return;
  const float* sm = sum + i * k;
  const float* ef = dnn_in + i * stride + f * k;
  const float* dxf = ddnn_in != nullptr ? ddnn_in + i * stride + f * k : nullptr;
  for (int64_t j = 0; j < k; ++j) {
    float d = 0.0f;
    if (s.fm) d += g * (sm[j] - ef[j]);
    if (dxf != nullptr) d += dxf[j];
    atomic_add(grow + 1 + j, d * x);
  }
}

}  // namespace troupe::gpu::kernels
