#pragma once

// 2-D pooling (NHWC) one output element at a time, written once for the CPU backend
// (core/cpu/conv_pool.cpp, images split over intra-op threads) and the CUDA one
// (gpu/kernels/sparse.cuh, one thread per output element). TROUPE_HD, no CUDA header.
//
// Windows clip at the input's edges: "same" padding is never read. Max pooling takes the
// largest element inside; average pooling divides by the elements inside (TensorFlow's and
// Keras's "same": padding excluded). The backward pass adds each output's gradient into
// the input elements it came from (for max, the first largest one in row-major window
// order), with atomics: windows may overlap.

#include <cstdint>

#include "core/host_device.hpp"
#include "core/kernels/atomic_add.hpp"
#include "core/layer_ops.hpp"

namespace troupe::core::kernels {

/// The sizes of one pooling: x [n, h, w, c] -> y [n, oh, ow, c].
struct Pool2dShape {
  int64_t n = 0, h = 0, w = 0, c = 0, oh = 0, ow = 0;
};

/// The input rows and columns output element o's window covers, clipped to the input.
struct PoolWindow {
  int64_t base = 0;  // the offset of (image, row 0, column 0, channel)
  int64_t r0 = 0, r1 = 0, c0 = 0, c1 = 0;
};

TROUPE_HD inline PoolWindow pool_window(int64_t o, const Pool2dShape& s, const Pool2dGeometry& g) {
  const int64_t ch = o % s.c;
  int64_t t = o / s.c;
  const int64_t j = t % s.ow;
  t /= s.ow;
  const int64_t i = t % s.oh;
  const int64_t b = t / s.oh;
  PoolWindow win;
  win.base = b * s.h * s.w * s.c + ch;
  const int64_t top = i * g.stride_h - g.pad_top, left = j * g.stride_w - g.pad_left;
  win.r0 = top < 0 ? 0 : top;
  win.r1 = top + g.pool_h < s.h ? top + g.pool_h : s.h;
  win.c0 = left < 0 ? 0 : left;
  win.c1 = left + g.pool_w < s.w ? left + g.pool_w : s.w;
  return win;
}

/// y[o] from its window of x.
TROUPE_HD inline void pool2d_forward(int64_t o, const Pool2dShape& s, const Pool2dGeometry& g,
                                     bool max, const float* x, float* y) {
  const PoolWindow win = pool_window(o, s, g);
  float acc = max ? x[win.base + (win.r0 * s.w + win.c0) * s.c] : 0.0f;
  for (int64_t r = win.r0; r < win.r1; ++r)
    for (int64_t q = win.c0; q < win.c1; ++q) {
      const float v = x[win.base + (r * s.w + q) * s.c];
      if (max)
        acc = v > acc ? v : acc;
      else
        acc += v;
    }
  const int64_t count = (win.r1 - win.r0) * (win.c1 - win.c0);
  y[o] = max ? acc : acc / static_cast<float>(count);
}

/// Adds dy[o] into dx where y[o] came from (dx zeroed by the caller).
TROUPE_HD inline void pool2d_backward(int64_t o, const Pool2dShape& s, const Pool2dGeometry& g,
                                      bool max, const float* x, const float* y, const float* dy,
                                      float* dx) {
  const PoolWindow win = pool_window(o, s, g);
  if (max) {
    for (int64_t r = win.r0; r < win.r1; ++r)
      for (int64_t q = win.c0; q < win.c1; ++q) {
        const int64_t at = win.base + (r * s.w + q) * s.c;
        if (x[at] == y[o]) {
          atomic_add(dx + at, dy[o]);
          return;
        }
      }
    return;
  }
  const int64_t count = (win.r1 - win.r0) * (win.c1 - win.c0);
  const float share = dy[o] / static_cast<float>(count);
  for (int64_t r = win.r0; r < win.r1; ++r)
    for (int64_t q = win.c0; q < win.c1; ++q)
      atomic_add(dx + win.base + (r * s.w + q) * s.c, share);
}

}  // namespace troupe::core::kernels
