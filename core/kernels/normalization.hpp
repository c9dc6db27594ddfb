#pragma once

// The arithmetic of BatchNormalization and LayerNormalization, written once for the CPU
// backend (core/cpu/layer_kernels.cpp) and the CUDA one (gpu/kernels/layer_ops.cuh) in
// Keras's own order of operations (keras.ops.batch_normalization, layer_normalization):
//   inv = rsqrt(var + epsilon) * gamma,  y = x inv + (beta - mean inv).
// Statistics are the biased ones (divided by n), mean first, then the mean of the squared
// deviations: jnp.mean and jnp.var. TROUPE_HD, no CUDA header.

#include <math.h>

#include <cstdint>

#include "core/host_device.hpp"

namespace troupe::core::kernels {

TROUPE_HD inline float rstd_of(float var, float epsilon) {
  return 1.0f / sqrtf(var + epsilon);
}

/// Channel j's factor and shift of a normalization, y = x inv + shift, from its mean and
/// rstd = rstd_of(var). gamma, beta: null for Keras's scale=False, center=False.
TROUPE_HD inline void norm_coefficients(float mean, float rstd, const float* gamma,
                                        const float* beta, int64_t j, float& inv, float& shift) {
  inv = rstd;
  if (gamma != nullptr) inv = inv * gamma[j];
  shift = -mean * inv;
  if (beta != nullptr) shift = shift + beta[j];
}

/// One row of a layer normalization over its c elements; keeps the row's mean and
/// 1/sqrt(var + epsilon) for the backward pass. y may be x.
TROUPE_HD inline void layer_norm_row(const float* x, int64_t c, const float* gamma,
                                     const float* beta, float epsilon, float* y, float* mean_out,
                                     float* rstd_out) {
  float s = 0.0f;
  for (int64_t j = 0; j < c; ++j)
    s += x[j];
  const float mean = s / static_cast<float>(c);
  float q = 0.0f;
  for (int64_t j = 0; j < c; ++j) {
    const float d = x[j] - mean;
    q += d * d;
  }
  const float var = q / static_cast<float>(c);
  const float rstd = rstd_of(var, epsilon);
  for (int64_t j = 0; j < c; ++j) {
    float inv = 0.0f, shift = 0.0f;
    norm_coefficients(mean, rstd, gamma, beta, j, inv, shift);
    y[j] = x[j] * inv + shift;
  }
  *mean_out = mean;
  *rstd_out = rstd;
}

/// d(loss)/dx of one row of a layer normalization, from dy (gamma null: 1):
///   g = dy gamma,  dx = rstd (g - mean(g) - xhat mean(g xhat)),  xhat = (x - mean) rstd.
TROUPE_HD inline void layer_norm_backward_row(const float* x, int64_t c, const float* gamma,
                                              float mean, float rstd, const float* dy, float* dx) {
  float sg = 0.0f, sgx = 0.0f;
  for (int64_t j = 0; j < c; ++j) {
    const float g = gamma != nullptr ? dy[j] * gamma[j] : dy[j];
    sg += g;
    sgx += g * (x[j] - mean) * rstd;
  }
  const float inv_c = 1.0f / static_cast<float>(c);
  const float mg = sg * inv_c, mgx = sgx * inv_c;
  for (int64_t j = 0; j < c; ++j) {
    const float g = gamma != nullptr ? dy[j] * gamma[j] : dy[j];
    dx[j] = rstd * (g - mg - (x[j] - mean) * rstd * mgx);
  }
}

/// d(loss)/dx of one element of a batch normalization over r rows, given its channel's
/// rstd = rstd_of(var) and sums over the batch of dy (sum_dy) and of dy xhat (sum_dy_xhat).
/// With batch statistics the mean and variance depend on x:
///   dx = gamma rstd (dy - sum_dy / r - xhat sum_dy_xhat / r),  xhat = (x - mean) rstd;
/// without (the moving statistics, constants): dx = gamma rstd dy.
TROUPE_HD inline float batch_norm_dx(float x, float dy, float mean, float rstd, float gamma,
                                     bool batch_stats, float sum_dy, float sum_dy_xhat,
                                     float inv_r) {
  const float k = gamma * rstd;
  if (!batch_stats) return k * dy;
  const float xhat = (x - mean) * rstd;
  return k * (dy - sum_dy * inv_r - xhat * (sum_dy_xhat * inv_r));
}

}  // namespace troupe::core::kernels
