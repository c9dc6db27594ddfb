#pragma once

// Keras's activations (keras.activations, as its JAX backend computes them) one element
// at a time, and softmax one row at a time: written once for the CPU backend
// (core/cpu/layer_kernels.cpp) and the CUDA one (gpu/kernels/layer_ops.cuh). TROUPE_HD,
// no CUDA header.
//
//   y = kernels::activate(ActFn::gelu, x);
//   dx = kernels::activate_backward(ActFn::gelu, x, y, dy);

#include <math.h>

#include <cstdint>

#include "core/host_device.hpp"
#include "core/layer_ops.hpp"

namespace troupe::core::kernels {

// jax.nn.selu's constants (Klambauer et al.), as Keras uses them.
constexpr float kSeluAlpha = 1.6732632423543772848170429916717f;
constexpr float kSeluScale = 1.0507009873554804934193349852946f;
// keras.activations.leaky_relu's default negative slope (the ActFn's).
constexpr float kLeakyReluSlope = 0.2f;
// 1/sqrt(2), sqrt(2/pi), 1/sqrt(2 pi): the two forms of gelu.
constexpr float kInvSqrt2 = 0.70710678118654752440f;
constexpr float kSqrt2OverPi = 0.79788456080286535588f;
constexpr float kInvSqrt2Pi = 0.39894228040143267794f;
constexpr float kGeluCubic = 0.044715f;
// 2/sqrt(pi): erf's derivative at 0.
constexpr float kTwoOverSqrtPi = 1.12837916709551257390f;

TROUPE_HD inline float sigmoid(float x) {
  return 1.0f / (1.0f + expf(-x));
}

/// f(x) for every function but softmax and log_softmax (a row's: softmax_row).
TROUPE_HD inline float activate(ActFn f, float x) {
  switch (f) {
    case ActFn::relu:
      return x > 0.0f ? x : 0.0f;
    case ActFn::sigmoid:
      return sigmoid(x);
    case ActFn::tanh:
      return tanhf(x);
    case ActFn::gelu:  // exact: x Phi(x), Phi through erfc as jax writes it (no cancellation)
      return 0.5f * x * erfcf(-x * kInvSqrt2);
    case ActFn::gelu_tanh:
      return x * (0.5f * (1.0f + tanhf(kSqrt2OverPi * (x + kGeluCubic * (x * x * x)))));
    case ActFn::silu:
      return x * sigmoid(x);
    case ActFn::softplus:  // log(1 + e^x) without overflow: jax's logaddexp(x, 0)
      return fmaxf(x, 0.0f) + log1pf(expf(-fabsf(x)));
    case ActFn::elu:
      return x > 0.0f ? x : expm1f(x);
    case ActFn::selu:
      return kSeluScale * (x > 0.0f ? x : kSeluAlpha * expm1f(x));
    case ActFn::leaky_relu:
      return x >= 0.0f ? x : kLeakyReluSlope * x;
    case ActFn::exponential:
      return expf(x);
    case ActFn::negative:
      return -x;
    case ActFn::log:
      return logf(x);
    case ActFn::log1p:
      return log1pf(x);
    case ActFn::sqrt:
      return sqrtf(x);
    case ActFn::square:
      return x * x;
    case ActFn::abs:
      return fabsf(x);
    case ActFn::sign:
      return x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : 0.0f);
    case ActFn::erf:
      return erff(x);
    case ActFn::log_sigmoid:  // -softplus(-x), without overflow
      return fminf(x, 0.0f) - log1pf(expf(-fabsf(x)));
    case ActFn::logical_not:
      return x == 0.0f ? 1.0f : 0.0f;
    case ActFn::reciprocal:
      return 1.0f / x;
    case ActFn::linear:
    case ActFn::softmax:
    case ActFn::log_softmax:
      break;
  }
  return x;
}

/// d f/dx * dy, from x and y = f(x) (act_fn_uses_output says which one is read; the other
/// may be anything). Not softmax (softmax_backward_row).
TROUPE_HD inline float activate_backward(ActFn f, float x, float y, float dy) {
  switch (f) {
    case ActFn::relu:
      return y > 0.0f ? dy : 0.0f;
    case ActFn::sigmoid:
      return dy * y * (1.0f - y);
    case ActFn::tanh:
      return dy * (1.0f - y * y);
    case ActFn::exponential:
      return dy * y;
    case ActFn::gelu: {
      const float cdf = 0.5f * erfcf(-x * kInvSqrt2);
      return dy * (cdf + x * kInvSqrt2Pi * expf(-0.5f * x * x));
    }
    case ActFn::gelu_tanh: {
      const float t = tanhf(kSqrt2OverPi * (x + kGeluCubic * (x * x * x)));
      const float dt = kSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * x * x);
      return dy * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * dt);
    }
    case ActFn::silu: {
      const float s = sigmoid(x);
      return dy * s * (1.0f + x * (1.0f - s));
    }
    case ActFn::softplus:
      return dy * sigmoid(x);
    case ActFn::elu:
      return x > 0.0f ? dy : dy * expf(x);
    case ActFn::selu:
      return x > 0.0f ? kSeluScale * dy : dy * (kSeluScale * kSeluAlpha) * expf(x);
    case ActFn::leaky_relu:
      return x >= 0.0f ? dy : kLeakyReluSlope * dy;
    case ActFn::negative:
      return -dy;
    case ActFn::log:
      return dy / x;
    case ActFn::log1p:
      return dy / (1.0f + x);
    case ActFn::sqrt:
      return dy * 0.5f / y;
    case ActFn::square:
      return dy * 2.0f * x;
    case ActFn::abs:  // jax: the gradient at 0 is +dy
      return x >= 0.0f ? dy : -dy;
    case ActFn::erf:
      return dy * kTwoOverSqrtPi * expf(-x * x);
    case ActFn::log_sigmoid:
      return dy * sigmoid(-x);
    case ActFn::reciprocal:
      return -dy * y * y;
    case ActFn::sign:
    case ActFn::logical_not:
      return 0.0f;
    case ActFn::linear:
    case ActFn::softmax:
    case ActFn::log_softmax:
      break;
  }
  return dy;
}

/// One row of softmax: y = exp(x - max) / sum (jax.nn.softmax's steps); y may be x.
TROUPE_HD inline void softmax_row(const float* x, float* y, int64_t c) {
  float m = x[0];
  for (int64_t j = 1; j < c; ++j)
    m = fmaxf(m, x[j]);
  float s = 0.0f;
  for (int64_t j = 0; j < c; ++j) {
    const float e = expf(x[j] - m);
    y[j] = e;
    s += e;
  }
  for (int64_t j = 0; j < c; ++j)
    y[j] = y[j] / s;
}

/// Its backward: dx = y (dy - sum(dy y)); dx may be dy.
TROUPE_HD inline void softmax_backward_row(const float* y, const float* dy, float* dx, int64_t c) {
  float dot = 0.0f;
  for (int64_t j = 0; j < c; ++j)
    dot += dy[j] * y[j];
  for (int64_t j = 0; j < c; ++j)
    dx[j] = y[j] * (dy[j] - dot);
}

/// One row of log_softmax: y = x - max - log(sum(exp(x - max))); y may be x.
TROUPE_HD inline void log_softmax_row(const float* x, float* y, int64_t c) {
  float m = x[0];
  for (int64_t j = 1; j < c; ++j)
    m = fmaxf(m, x[j]);
  float s = 0.0f;
  for (int64_t j = 0; j < c; ++j)
    s += expf(x[j] - m);
  const float shift = m + logf(s);
  for (int64_t j = 0; j < c; ++j)
    y[j] = x[j] - shift;
}

/// Its backward, from y: dx = dy - exp(y) sum(dy); dx may be dy.
TROUPE_HD inline void log_softmax_backward_row(const float* y, const float* dy, float* dx,
                                               int64_t c) {
  float sum = 0.0f;
  for (int64_t j = 0; j < c; ++j)
    sum += dy[j];
  for (int64_t j = 0; j < c; ++j)
    dx[j] = dy[j] - expf(y[j]) * sum;
}

/// f over rows of c elements (softmax, log_softmax) rather than element by element.
TROUPE_HD inline bool act_fn_by_rows(ActFn f) {
  return f == ActFn::softmax || f == ActFn::log_softmax;
}

}  // namespace troupe::core::kernels
