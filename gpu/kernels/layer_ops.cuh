#pragma once

// Bodies of the layer graph's generic kernels (core/backend.hpp, "Kernels of the layer
// graph"), each a function of one index that gpu/kernels/layer_ops.cu runs in a
// grid-stride loop: per element for element-wise work, per row where a reduction runs
// along a row (one thread each, summing in order); reductions down columns are summed in
// row lanes (kColumnLanes, gpu/kernels/hd.cuh; the device side in columns.cuh). Their arithmetic is
// core/kernels/'s, shared with the CPU backend; tests/core/test_basic_layers.cpp runs
// these bodies on the host against the CPU backend.

#include <cstdint>

#include "core/kernels/activation.hpp"
#include "core/kernels/dropout.hpp"
#include "core/kernels/normalization.hpp"
#include "core/layer_ops.hpp"
#include "gpu/kernels/elementwise.cuh"
#include "gpu/kernels/hd.cuh"

namespace troupe::gpu::kernels {

namespace ck = core::kernels;

/// Element i of y = f(x) (not softmax).
TROUPE_HD inline void activation_forward(int64_t i, core::ActFn f, const float* x, float* y) {
  y[i] = ck::activate(f, x[i]);
}

/// Element i of dx = f'(x) dy; x or y may be null where f does not read it.
TROUPE_HD inline void activation_backward(int64_t i, core::ActFn f, const float* x, const float* y,
                                          const float* dy, float* dx) {
  dx[i] = ck::activate_backward(f, x != nullptr ? x[i] : 0.0f, y != nullptr ? y[i] : 0.0f, dy[i]);
}

/// Row r of a softmax over rows of c.
TROUPE_HD inline void softmax_forward(int64_t r, const float* x, float* y, int64_t c) {
  ck::softmax_row(x + r * c, y + r * c, c);
}

TROUPE_HD inline void softmax_backward(int64_t r, const float* y, const float* dy, float* dx,
                                       int64_t c) {
  ck::softmax_backward_row(y + r * c, dy + r * c, dx + r * c, c);
}

TROUPE_HD inline void log_softmax_forward(int64_t r, const float* x, float* y, int64_t c) {
  ck::log_softmax_row(x + r * c, y + r * c, c);
}

TROUPE_HD inline void log_softmax_backward(int64_t r, const float* y, const float* dy, float* dx,
                                           int64_t c) {
  ck::log_softmax_backward_row(y + r * c, dy + r * c, dx + r * c, c);
}

/// y = a x + b y (b = 0: y not read).
TROUPE_HD inline void axpby(int64_t i, float a, const float* x, float b, float* y) {
  y[i] = b == 0.0f ? a * x[i] : a * x[i] + b * y[i];
}

TROUPE_HD inline void multiply(int64_t i, const float* x1, const float* x2, float* y,
                               bool accumulate) {
  const float v = x1[i] * x2[i];
  y[i] = accumulate ? y[i] + v : v;
}

/// Element i of src [r, c] into columns [offset, offset + c) of dst [r, C].
TROUPE_HD inline void copy_columns(int64_t i, const float* src, float* dst, int64_t c, int64_t C,
                                   int64_t offset, bool accumulate) {
  float* to = dst + (i / c) * C + offset + i % c;
  *to = accumulate ? *to + src[i] : src[i];
}

/// Element i of dst [r, c] from columns [offset, offset + c) of src [r, C].
TROUPE_HD inline void take_columns(int64_t i, const float* src, float* dst, int64_t c, int64_t C,
                                   int64_t offset) {
  dst[i] = src[(i / c) * C + offset + i % c];
}

/// Output element i (of [a, c]) of a reduction over the middle axis of x [a, m, c].
TROUPE_HD inline void reduce_middle(int64_t i, core::Reduce op, const float* x, float* y, int64_t m,
                                    int64_t c) {
  const float* in = x + (i / c) * m * c + i % c;
  float v = in[0];
  for (int64_t k = 1; k < m; ++k)
    v = op == core::Reduce::max ? fmaxf(v, in[k * c]) : v + in[k * c];
  y[i] = op == core::Reduce::mean ? v / static_cast<float>(m) : v;
}

/// Its backward for output element i: the m input elements it reduced (max: dy to the
/// first one equal to the maximum, 0 to the others).
TROUPE_HD inline void reduce_middle_backward(int64_t i, core::Reduce op, const float* x,
                                             const float* y, const float* dy, float* dx, int64_t m,
                                             int64_t c) {
  const int64_t base = (i / c) * m * c + i % c;
  const float g = op == core::Reduce::mean ? dy[i] * (1.0f / static_cast<float>(m)) : dy[i];
  bool found = false;
  for (int64_t k = 0; k < m; ++k) {
    const int64_t at = base + k * c;
    if (op != core::Reduce::max) {
      dx[at] = g;
    } else {
      const bool here = !found && x[at] == y[i];
      dx[at] = here ? g : 0.0f;
      found = found || here;
    }
  }
}

/// y[r] = row r of x1 dotted with row r of x2 (rows of c).
TROUPE_HD inline void row_dot(int64_t r, const float* x1, const float* x2, float* y, int64_t c) {
  float s = 0.0f;
  for (int64_t j = 0; j < c; ++j)
    s += x1[r * c + j] * x2[r * c + j];
  y[r] = s;
}

TROUPE_HD inline void scale_rows(int64_t i, const float* x, const float* s, float* y, int64_t c,
                                 bool accumulate) {
  const float v = x[i] * s[i / c];
  y[i] = accumulate ? y[i] + v : v;
}

/// The squared deviations from its mean of each column of x [r, c] (moments' second pass).
struct Deviations {
  const float* x;
  const float* mean;
  int64_t c;
  struct Term {
    const float* x;
    float m;
    int64_t c, j;
    TROUPE_HD void operator()(int64_t i, float (&acc)[1]) const {
      const float d = x[i * c + j] - m;
      acc[0] += d * d;
    }
  };
  TROUPE_HD Term operator()(int64_t j) const { return Term{x, mean[j], c, j}; }
};

/// Column j's mean and biased variance over the r rows of x [r, c], in row lanes: the sum
/// first (mean[j] written), then the squared deviations from it.
TROUPE_HD inline void moments(int64_t j, const float* x, float* mean, float* var, int64_t r,
                              int64_t c) {
  float s[1];
  column_lane_sums<1>(j, r, c, WeightedColumns{x, nullptr, c}, s);
  mean[j] = s[0] / static_cast<float>(r);
  column_lane_sums<1>(j, r, c, Deviations{x, mean, c}, s);
  var[j] = s[0] / static_cast<float>(r);
}

/// Element i of a batch normalization of rows of c channels (gamma, beta may be null).
TROUPE_HD inline void batch_norm_forward(int64_t i, const float* x, const float* mean,
                                         const float* var, const float* gamma, const float* beta,
                                         float epsilon, float* y, int64_t c) {
  const int64_t j = i % c;
  float inv = 0.0f, shift = 0.0f;
  ck::norm_coefficients(mean[j], ck::rstd_of(var[j], epsilon), gamma, beta, j, inv, shift);
  y[i] = x[i] * inv + shift;
}

/// Each column's terms of dy and dy xhat (x normalized by the column's batch moments).
struct BatchNormTerms {
  const float* x;
  const float* mean;
  const float* var;
  float epsilon;
  const float* dy;
  int64_t c;
  struct Term {
    const float* x;
    const float* dy;
    float m, rstd;
    int64_t c, j;
    TROUPE_HD void operator()(int64_t i, float (&acc)[2]) const {
      const float g = dy[i * c + j];
      acc[0] += g;
      acc[1] += g * ((x[i * c + j] - m) * rstd);
    }
  };
  TROUPE_HD Term operator()(int64_t j) const {
    return Term{x, dy, mean[j], ck::rstd_of(var[j], epsilon), c, j};
  }
};

/// Column j's sums over the batch of dy and dy xhat: the gradients of beta and gamma.
TROUPE_HD inline void batch_norm_sums(int64_t j, const float* x, const float* mean,
                                      const float* var, float epsilon, const float* dy,
                                      float* sum_dy, float* sum_dy_xhat, int64_t r, int64_t c) {
  float s[2];
  column_lane_sums<2>(j, r, c, BatchNormTerms{x, mean, var, epsilon, dy, c}, s);
  sum_dy[j] = s[0];
  sum_dy_xhat[j] = s[1];
}

/// Element i of a batch normalization's input gradient (sums from batch_norm_sums; unread
/// without batch statistics).
TROUPE_HD inline void batch_norm_dx(int64_t i, const float* x, const float* mean, const float* var,
                                    const float* gamma, float epsilon, bool batch_stats,
                                    const float* dy, const float* sum_dy, const float* sum_dy_xhat,
                                    float* dx, int64_t r, int64_t c) {
  const int64_t j = i % c;
  dx[i] = ck::batch_norm_dx(x[i], dy[i], mean[j], ck::rstd_of(var[j], epsilon),
                            gamma != nullptr ? gamma[j] : 1.0f, batch_stats,
                            batch_stats ? sum_dy[j] : 0.0f, batch_stats ? sum_dy_xhat[j] : 0.0f,
                            1.0f / static_cast<float>(r));
}

/// Row r of a layer normalization over rows of c.
TROUPE_HD inline void layer_norm_forward(int64_t r, const float* x, const float* gamma,
                                         const float* beta, float epsilon, float* y, float* mean,
                                         float* rstd, int64_t c) {
  ck::layer_norm_row(x + r * c, c, gamma, beta, epsilon, y + r * c, mean + r, rstd + r);
}

TROUPE_HD inline void layer_norm_backward(int64_t r, const float* x, const float* gamma,
                                          const float* mean, const float* rstd, const float* dy,
                                          float* dx, int64_t c) {
  ck::layer_norm_backward_row(x + r * c, c, gamma, mean[r], rstd[r], dy + r * c, dx + r * c);
}

/// Each column's terms of a layer normalization's gamma and beta gradients: dy xhat and dy,
/// xhat normalized by its row's moments.
struct LayerNormParamTerms {
  const float* x;
  const float* mean;
  const float* rstd;
  const float* dy;
  int64_t c;
  struct Term {
    const float* x;
    const float* mean;
    const float* rstd;
    const float* dy;
    int64_t c, j;
    TROUPE_HD void operator()(int64_t i, float (&acc)[2]) const {
      const float g = dy[i * c + j];
      acc[0] += g * ((x[i * c + j] - mean[i]) * rstd[i]);
      acc[1] += g;
    }
  };
  TROUPE_HD Term operator()(int64_t j) const { return Term{x, mean, rstd, dy, c, j}; }
};

/// Column j of a layer normalization's gamma and beta gradients (either may be null).
TROUPE_HD inline void layer_norm_param_grads(int64_t j, const float* x, const float* mean,
                                             const float* rstd, const float* dy, float* dgamma,
                                             float* dbeta, int64_t r, int64_t c) {
  float s[2];
  column_lane_sums<2>(j, r, c, LayerNormParamTerms{x, mean, rstd, dy, c}, s);
  if (dgamma != nullptr) dgamma[j] = s[0];
  if (dbeta != nullptr) dbeta[j] = s[1];
}

/// Element i of inverted dropout (the backward pass is the same on dy).
TROUPE_HD inline void dropout(int64_t i, const float* x, float* y, float rate, uint64_t seed) {
  y[i] = ck::dropout_keep(seed, i, rate) ? x[i] / (1.0f - rate) : 0.0f;
}

}  // namespace troupe::gpu::kernels
