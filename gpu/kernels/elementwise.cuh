#pragma once

// Bodies of the element-wise kernels: one call per element (or per output element).

#include "core/half.hpp"
#include "gpu/kernels/hd.cuh"

namespace troupe::gpu::kernels {

TROUPE_HD inline void relu_forward(int64_t i, const float* x, float* y) {
  y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

TROUPE_HD inline void relu_backward(int64_t i, const float* y, const float* dy, float* dx) {
  dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

TROUPE_HD inline void add(int64_t i, const float* x, float* y) {
  y[i] += x[i];
}

TROUPE_HD inline void scale(int64_t i, float* x, float factor) {
  x[i] *= factor;
}

/// Sets *flag when element i is not finite (a benign race: every writer writes 1).
TROUPE_HD inline void check_finite(int64_t i, const float* x, int* flag) {
  if (!finite(x[i])) *flag = 1;
}

/// The terms of a column sum of a row-major [rows, cols] matrix, each row weighted by
/// w[row] when w is given (a MakeTerm of column_lane_sums, gpu/kernels/hd.cuh).
struct WeightedColumns {
  const float* x;
  const float* w;
  int64_t cols;
  struct Term {
    const float* x;
    const float* w;
    int64_t cols, j;
    TROUPE_HD void operator()(int64_t r, float (&acc)[1]) const {
      acc[0] += w != nullptr ? w[r] * x[r * cols + j] : x[r * cols + j];
    }
  };
  TROUPE_HD Term operator()(int64_t j) const { return Term{x, w, cols, j}; }
};

/// Column j of a row-major [rows, cols] matrix summed (added to out[j] when `accumulate`),
/// each row weighted by w[row] when w is given: the bias' gradient (no weights), the dense
/// weights' of a CTR model, the layers' column_sums. In row lanes, as the device sums it.
TROUPE_HD inline void column_sum(int64_t j, const float* x, const float* w, float* out,
                                 int64_t rows, int64_t cols, bool accumulate = false) {
  float s[1];
  column_lane_sums<1>(j, rows, cols, WeightedColumns{x, w, cols}, s);
  out[j] = accumulate ? out[j] + s[0] : s[0];
}

/// y[i] += b[i % channels]: a bias over the last axis (NHWC convolutions).
TROUPE_HD inline void add_bias(int64_t i, float* y, const float* b, int64_t channels) {
  y[i] += b[i % channels];
}

/// Element i of a float32 array rounded into 16-bit type `t` (1: bfloat16, 2: float16).
TROUPE_HD inline void to_half(int64_t i, const float* x, uint16_t* y, int t) {
  y[i] = t == 1 ? core::float_to_bf16(x[i]) : core::float_to_fp16(x[i]);
}

TROUPE_HD inline void from_half(int64_t i, const uint16_t* x, float* y, int t) {
  y[i] = t == 1 ? core::bf16_to_float(x[i]) : core::fp16_to_float(x[i]);
}

/// Element i as a policy's matrix unit reads it, back in float32 (t: 1 bfloat16, 2 float16,
/// 3 TF32): the operands of products that run in float32 with low-precision semantics.
TROUPE_HD inline void round_values(int64_t i, const float* x, float* y, int t) {
  y[i] = t == 3 ? core::round_tf32(x[i])
                : core::round_to(x[i], t == 1 ? core::DType::bfloat16 : core::DType::float16);
}

/// A convolution kernel [k, k, c, f] (Keras: HWIO) as cuDNN's NHWC filter [f, k, k, c]
/// (OHWI), element i of the output; and back, for the kernel's gradient.
TROUPE_HD inline void hwio_to_ohwi(int64_t i, const float* hwio, float* ohwi, int64_t khw,
                                   int64_t c, int64_t f) {
  // i indexes ohwi: ((o * khw) + s) * c + ci, s the spatial position.
  const int64_t ci = i % c, s = (i / c) % khw, o = i / (c * khw);
  ohwi[i] = hwio[(s * c + ci) * f + o];
}

TROUPE_HD inline void ohwi_to_hwio(int64_t i, const float* ohwi, float* hwio, int64_t khw,
                                   int64_t c, int64_t f) {
  // i indexes hwio: (s * c + ci) * f + o.
  const int64_t o = i % f, ci = (i / f) % c, s = i / (f * c);
  hwio[i] = ohwi[(o * khw + s) * c + ci];
}

}  // namespace troupe::gpu::kernels
