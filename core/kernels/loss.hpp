#pragma once

// The losses of compile() (core::LossKind) one element or one row at a time, as Keras 3's
// JAX backend computes them (keras/src/backend/jax/nn.py, keras/src/losses/losses.py):
// written once for the CPU backend (core/cpu/loss_kernels.cpp) and the CUDA one
// (gpu/kernels/keras_loss.cu). Each returns its element's or row's loss and writes
// d(loss)/d(prediction) times `scale` (the caller's 1/count, loss weight and loss scale).
// The logits forms of binary and sparse categorical cross-entropy are the backends'
// sigmoid_cross_entropy and softmax_cross_entropy (the same formulas), not these.
// TROUPE_HD, no CUDA header.
//
//   float g;
//   const float l = kernels::binary_crossentropy(p, t, 1.0f / n, &g);

#include <math.h>

#include <cstdint>

#include "core/host_device.hpp"

namespace troupe::core::kernels {

/// keras.backend.epsilon(): probabilities are clipped to [eps, 1 - eps], both float32.
constexpr float kLossEpsilon = 1e-7f;

/// p clipped to [eps, 1 - eps]; `inside` says whether it was in range, where the clip's
/// gradient is 1 (0 outside: a saturated prediction gets no gradient, as in Keras).
TROUPE_HD inline float clip_probability(float p, bool& inside) {
  const float lo = kLossEpsilon, hi = 1.0f - kLossEpsilon;
  inside = p >= lo && p <= hi;
  return p < lo ? lo : (p > hi ? hi : p);
}

/// Binary cross-entropy of probability p against label t: -(t log q + (1 - t) log(1 - q))
/// with q = p clipped.
TROUPE_HD inline float binary_crossentropy(float p, float t, float scale, float* grad) {
  bool inside = false;
  const float q = clip_probability(p, inside);
  *grad = inside ? (-t / q + (1.0f - t) / (1.0f - q)) * scale : 0.0f;
  return -(t * logf(q) + (1.0f - t) * logf(1.0f - q));
}

/// Squared error of one element (mean squared error is their mean).
TROUPE_HD inline float squared_error(float p, float t, float scale, float* grad) {
  const float d = p - t;
  *grad = 2.0f * d * scale;
  return d * d;
}

/// Categorical cross-entropy of one row of c predictions against the row's label vector t,
/// or, with t null, against class `label` (sparse categorical cross-entropy: a one-hot t).
/// Probabilities (logits false): the row is divided by its sum, then clipped, then
/// -sum t log q; the gradient flows through the division. Logits: -sum t log_softmax(z),
/// whose gradient is softmax(z) sum(t) - t (label vectors need not sum to 1).
TROUPE_HD inline float categorical_crossentropy_row(const float* p, const float* t, int32_t label,
                                                    int64_t c, bool logits, float scale, float* g) {
  float loss = 0.0f;
  if (logits) {
    float m = p[0];
    for (int64_t j = 1; j < c; ++j)
      m = p[j] > m ? p[j] : m;
    float sum = 0.0f;
    for (int64_t j = 0; j < c; ++j)
      sum += expf(p[j] - m);
    const float log_sum = logf(sum);
    float t_sum = 0.0f;
    for (int64_t j = 0; j < c; ++j) {
      const float tj = t != nullptr ? t[j] : (j == label ? 1.0f : 0.0f);
      loss -= tj * (p[j] - m - log_sum);
      t_sum += tj;
    }
    for (int64_t j = 0; j < c; ++j) {
      const float tj = t != nullptr ? t[j] : (j == label ? 1.0f : 0.0f);
      g[j] = (expf(p[j] - m) / sum * t_sum - tj) * scale;
    }
    return loss;
  }
  float sum = 0.0f;
  for (int64_t j = 0; j < c; ++j)
    sum += p[j];
  // dL/dq_j = -t_j / q_j where q_j was not clipped; dL/dp_j = (dL/dq_j - sum_i dL/dq_i q_i) / s.
  float dot = 0.0f;
  for (int64_t j = 0; j < c; ++j) {
    const float tj = t != nullptr ? t[j] : (j == label ? 1.0f : 0.0f);
    const float q = p[j] / sum;
    bool inside = false;
    const float qc = clip_probability(q, inside);
    loss -= tj * logf(qc);
    const float dq = inside ? -tj / qc : 0.0f;
    g[j] = dq;
    dot += dq * q;
  }
  for (int64_t j = 0; j < c; ++j)
    g[j] = (g[j] - dot) / sum * scale;
  return loss;
}

}  // namespace troupe::core::kernels
