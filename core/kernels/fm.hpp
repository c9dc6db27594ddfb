#pragma once

// The factorization machine's pairwise term (FactorizationMachine, core/layers/), written
// once for the CPU backend (core/cpu/sparse_kernels.cpp) and the CUDA one
// (gpu/kernels/sparse.cuh). x [b, F, k]: F field embeddings of width k per example;
//   y[b]            = 1/2 sum_j ((sum_f x[b,f,j])^2 - sum_f x[b,f,j]^2)
//   dy/dx[b,f,j]    = sum_f' x[b,f',j] - x[b,f,j].
// TROUPE_HD, no CUDA header.

#include <cstdint>

#include "core/host_device.hpp"

namespace troupe::core::kernels {

/// Example b's output.
TROUPE_HD inline void fm_forward(int64_t b, int64_t fields, int64_t k, const float* x, float* y) {
  const float* xb = x + b * fields * k;
  float out = 0.0f;
  for (int64_t j = 0; j < k; ++j) {
    float sum = 0.0f, squares = 0.0f;
    for (int64_t f = 0; f < fields; ++f) {
      const float v = xb[f * k + j];
      sum += v;
      squares += v * v;
    }
    out += sum * sum - squares;
  }
  y[b] = 0.5f * out;
}

/// Column j of example b (t = b * k + j): dx[b, :, j] from dy[b].
TROUPE_HD inline void fm_backward(int64_t t, int64_t fields, int64_t k, const float* x,
                                  const float* dy, float* dx) {
  const int64_t b = t / k, j = t % k;
  const float* xb = x + b * fields * k + j;
  float* dxb = dx + b * fields * k + j;
  float sum = 0.0f;
  for (int64_t f = 0; f < fields; ++f)
    sum += xb[f * k];
  const float g = dy[b];
  for (int64_t f = 0; f < fields; ++f)
    dxb[f * k] = g * (sum - xb[f * k]);
}

}  // namespace troupe::core::kernels
