#pragma once

// Bodies of the sparse layers' CUDA kernels that are the GPU's alone: an image copied into
// a larger zero-padded one and cropped back out of it, for the convolutions whose "same"
// padding is uneven (cuDNN's descriptor pads both sides alike; TensorFlow pads the same
// way). The pooling, FM and embedding bodies are core/kernels/'s, shared with the CPU.

#include <cstdint>

#include "core/host_device.hpp"
#include "core/layer_ops.hpp"

namespace troupe::gpu::kernels {

/// x [n, h, w, c] inside padded [n, ph, pw, c] at (top, left).
struct PadShape {
  int64_t n = 0, h = 0, w = 0, c = 0, ph = 0, pw = 0, top = 0, left = 0;
  bool needed() const { return ph != h || pw != w; }
};

/// A convolution's padding split into the part both sides of an axis share (cuDNN's
/// descriptor's: even_h, even_w) and the rest, which pads a copy of x [n, h, w, c].
struct SplitPadding {
  PadShape pad;
  int64_t even_h = 0, even_w = 0;
};

inline SplitPadding split_padding(const core::Conv2dGeometry& g, int64_t n, int64_t h, int64_t w,
                                  int64_t c) {
  SplitPadding s;
  s.even_h = g.pad_top < g.pad_bottom ? g.pad_top : g.pad_bottom;
  s.even_w = g.pad_left < g.pad_right ? g.pad_left : g.pad_right;
  s.pad = {n,
           h,
           w,
           c,
           h + g.pad_top + g.pad_bottom - 2 * s.even_h,
           w + g.pad_left + g.pad_right - 2 * s.even_w,
           g.pad_top - s.even_h,
           g.pad_left - s.even_w};
  return s;
}

/// Element i of the padded image: x's element, or 0 in the padding.
TROUPE_HD inline void pad_image(int64_t i, const PadShape& s, const float* x, float* padded) {
  const int64_t ch = i % s.c;
  int64_t t = i / s.c;
  const int64_t q = t % s.pw - s.left;
  t /= s.pw;
  const int64_t r = t % s.ph - s.top;
  const int64_t b = t / s.ph;
  padded[i] =
      r >= 0 && r < s.h && q >= 0 && q < s.w ? x[((b * s.h + r) * s.w + q) * s.c + ch] : 0.0f;
}

/// Element i of x [n, h, w, c]: its element of the padded image.
TROUPE_HD inline void crop_image(int64_t i, const PadShape& s, const float* padded, float* x) {
  const int64_t ch = i % s.c;
  int64_t t = i / s.c;
  const int64_t q = t % s.w;
  t /= s.w;
  const int64_t r = t % s.h;
  const int64_t b = t / s.h;
  x[i] = padded[((b * s.ph + r + s.top) * s.pw + q + s.left) * s.c + ch];
}

}  // namespace troupe::gpu::kernels
