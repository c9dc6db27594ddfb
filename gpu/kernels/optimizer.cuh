#pragma once

// Bodies of the optimizer kernels: one element's update, with the formulas of the CPU's
// core::Optimizer::update (Keras semantics), so a device's variables move as the host's.

#include "gpu/kernels/hd.cuh"

namespace troupe::gpu::kernels {

enum class OptimizerKind : int { sgd, momentum, adagrad, adam, rmsprop, ftrl };

/// One update's constants (core::OptimizerConfig with the learning rate of this update, and
/// Adam's bias-corrected rate, which depends on the step and is computed on the host in
/// double as the CPU does).
struct OptimizerStep {
  OptimizerKind kind = OptimizerKind::sgd;
  float lr = 0.01f;
  float weight_decay = 0.0f;
  float l2_shrinkage = 0.0f;
  float momentum = 0.0f;
  bool nesterov = false;
  float beta_1 = 0.9f, beta_2 = 0.999f, epsilon = 1e-7f, rho = 0.9f;
  float l1 = 0.0f, l2 = 0.0f, beta = 0.0f, power = -0.5f;
  float adam_lr_t = 0.0f;
};

TROUPE_HD inline float ftrl_root(float a, float power) {
  return power == -0.5f ? sqrtf(a) : powf(a, -power);
}

/// Element `i` of w with gradient g[gi] and slots s0, s1 (null when unused).
TROUPE_HD inline void optimizer_update(const OptimizerStep& c, int64_t i, int64_t gi, float* w,
                                       const float* g, float* s0, float* s1) {
  const float gv = g[gi];
  // Keras 3's decoupled weight decay comes before the update (FTRL reads the decayed w).
  if (c.weight_decay != 0.0f) w[i] -= w[i] * c.weight_decay * c.lr;
  switch (c.kind) {
    case OptimizerKind::sgd:
      w[i] -= c.lr * gv;
      return;
    case OptimizerKind::momentum: {
      const float v = c.momentum * s0[i] - c.lr * gv;
      s0[i] = v;
      w[i] += c.nesterov ? c.momentum * v - c.lr * gv : v;
      return;
    }
    case OptimizerKind::adagrad: {
      const float acc = s0[i] + gv * gv;
      s0[i] = acc;
      w[i] -= c.lr * gv / sqrtf(acc + c.epsilon);
      return;
    }
    case OptimizerKind::adam: {
      const float m = s0[i] + (gv - s0[i]) * (1.0f - c.beta_1);
      const float v = s1[i] + (gv * gv - s1[i]) * (1.0f - c.beta_2);
      s0[i] = m;
      s1[i] = v;
      w[i] -= m * c.adam_lr_t / (sqrtf(v) + c.epsilon);
      return;
    }
    case OptimizerKind::rmsprop: {
      const float ms = c.rho * s0[i] + (1.0f - c.rho) * (gv * gv);
      s0[i] = ms;
      if (c.momentum > 0.0f) {
        const float mom = c.momentum * s1[i] + c.lr * gv / sqrtf(ms + c.epsilon);
        s1[i] = mom;
        w[i] -= mom;
      } else {
        w[i] -= c.lr * gv / sqrtf(ms + c.epsilon);
      }
      return;
    }
    case OptimizerKind::ftrl: {
      const float acc = s0[i], acc_new = acc + gv * gv;
      const float root_new = ftrl_root(acc_new, c.power);
      const float shrunk = c.l2_shrinkage != 0.0f ? gv + 2.0f * c.l2_shrinkage * w[i] : gv;
      const float lin = s1[i] + shrunk - (root_new - ftrl_root(acc, c.power)) / c.lr * w[i];
      s1[i] = lin;
      const float quadratic = (root_new + c.beta) / c.lr + 2.0f * c.l2;
      const float sign = lin > 0.0f ? 1.0f : (lin < 0.0f ? -1.0f : 0.0f);
      w[i] = fabsf(lin) <= c.l1 ? 0.0f : (sign * c.l1 - lin) / quadratic;
      s0[i] = acc_new;
      return;
    }
  }
}

/// Element i of a row update: row rows[i / width] of w, column i % width, gradient g[i].
TROUPE_HD inline void optimizer_update_row(const OptimizerStep& c, int64_t i, const int64_t* rows,
                                           int64_t width, float* w, const float* g, float* s0,
                                           float* s1) {
  const int64_t at = rows[i / width] * width + i % width;
  optimizer_update(c, at, i, w, g, s0, s1);
}

}  // namespace troupe::gpu::kernels
