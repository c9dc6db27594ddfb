// The CPU's convolutions and poolings, NHWC. A convolution is its input's patches (im2col:
// one row per output pixel, holding the kernel window's values in Keras's [kh, kw, c]
// order, zeros where the window hangs over the padding) times the kernel as a
// [kh kw c, f] matrix, through the dense product (core/cpu/matmul.cpp: oneDNN or Eigen,
// every precision policy, split over the intra-op threads); its backward pass is the dense
// backward pass on patches made again from its own input, and the patches' gradient added
// back into the image (col2im). Pooling runs core/kernels/pool2d.hpp's bodies.
#include <algorithm>

#include "core/cpu/cpu_backend.hpp"
#include "core/kernels/pool2d.hpp"
#include "core/parallel.hpp"

namespace troupe::core {

namespace {

constexpr int64_t kPatchRowGrain = 64;  // output pixels per intra-op chunk at least
constexpr int64_t kPoolElementGrain = 1 << 14;

struct ConvShape {
  int64_t n = 0, h = 0, w = 0, c = 0, kh = 0, kw = 0, f = 0, oh = 0, ow = 0;
  int64_t kdim() const { return kh * kw * c; }
  int64_t rows() const { return n * oh * ow; }
};

// x [n, h, w, c], w [kh, kw, c, f], y [n, oh, ow, f].
ConvShape conv_shape(ConstTensorView x, ConstTensorView w, const Shape& y) {
  TROUPE_ASSERT(x.shape().rank() == 4 && w.shape().rank() == 4 && y.rank() == 4 &&
                    w.shape()[2] == x.shape()[3] && y[3] == w.shape()[3] && y[0] == x.shape()[0],
                "conv2d: x [n, h, w, c], kernel [kh, kw, c, f] and y [n, oh, ow, f] do not fit");
  return {x.shape()[0], x.shape()[1], x.shape()[2], x.shape()[3], w.shape()[0],
          w.shape()[1], w.shape()[3], y[1],         y[2]};
}

struct ConvWorkspace final : Workspace {
  Tensor patches, dpatches;
  Tensor zero_bias, scratch_dw, scratch_db;  // for use_bias=False and unwanted gradients
};

ConvWorkspace& conv_workspace(std::unique_ptr<Workspace>& ws) {
  if (!ws) ws = std::make_unique<ConvWorkspace>();
  return static_cast<ConvWorkspace&>(*ws);
}

TensorView scratch(Tensor& t, const Shape& shape) {
  t.resize(shape);
  return t;
}

// Patch rows [r0, r1) of x.
void im2col(const Conv2dGeometry& g, const ConvShape& s, const float* x, float* patches, int64_t r0,
            int64_t r1) {
  const int64_t row_values = s.kw * s.c;
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t j = r % s.ow, i = (r / s.ow) % s.oh, b = r / (s.ow * s.oh);
    const float* image = x + b * s.h * s.w * s.c;
    const int64_t top = i * g.stride_h - g.pad_top, left = j * g.stride_w - g.pad_left;
    const bool inside_columns = left >= 0 && left + (s.kw - 1) * g.dilation_w < s.w;
    float* out = patches + r * s.kdim();
    for (int64_t ki = 0; ki < s.kh; ++ki, out += row_values) {
      const int64_t row = top + ki * g.dilation_h;
      if (row < 0 || row >= s.h) {
        std::fill_n(out, row_values, 0.0f);
        continue;
      }
      const float* src = image + row * s.w * s.c;
      if (inside_columns && g.dilation_w == 1) {  // the kernel row is contiguous in x
        std::copy_n(src + left * s.c, row_values, out);
        continue;
      }
      for (int64_t kj = 0; kj < s.kw; ++kj) {
        const int64_t col = left + kj * g.dilation_w;
        if (col < 0 || col >= s.w)
          std::fill_n(out + kj * s.c, s.c, 0.0f);
        else
          std::copy_n(src + col * s.c, s.c, out + kj * s.c);
      }
    }
  }
}

// dx of images [b0, b1) = the sum of their patches' gradients at the positions they read.
void col2im(const Conv2dGeometry& g, const ConvShape& s, const float* dpatches, float* dx,
            int64_t b0, int64_t b1) {
  const int64_t image_size = s.h * s.w * s.c;
  std::fill_n(dx + b0 * image_size, (b1 - b0) * image_size, 0.0f);
  for (int64_t b = b0; b < b1; ++b) {
    float* image = dx + b * image_size;
    for (int64_t i = 0; i < s.oh; ++i)
      for (int64_t j = 0; j < s.ow; ++j) {
        const float* p = dpatches + ((b * s.oh + i) * s.ow + j) * s.kdim();
        const int64_t top = i * g.stride_h - g.pad_top, left = j * g.stride_w - g.pad_left;
        for (int64_t ki = 0; ki < s.kh; ++ki) {
          const int64_t row = top + ki * g.dilation_h;
          for (int64_t kj = 0; kj < s.kw; ++kj, p += s.c) {
            const int64_t col = left + kj * g.dilation_w;
            if (row < 0 || row >= s.h || col < 0 || col >= s.w) continue;
            float* dst = image + (row * s.w + col) * s.c;
            for (int64_t e = 0; e < s.c; ++e)
              dst[e] += p[e];
          }
        }
      }
  }
}

void make_patches(const Conv2dGeometry& g, const ConvShape& s, ConstTensorView x, Tensor& out) {
  out.resize(Shape{s.rows(), s.kdim()});
  float* patches = out.data();
  parallel_for(s.rows(), kPatchRowGrain,
               [&](int64_t r0, int64_t r1) { im2col(g, s, x.data(), patches, r0, r1); });
}

kernels::Pool2dShape pool_shape(ConstTensorView x, const Shape& y) {
  TROUPE_ASSERT(
      x.shape().rank() == 4 && y.rank() == 4 && x.shape()[0] == y[0] && x.shape()[3] == y[3],
      "pool2d: x [n, h, w, c] and y [n, oh, ow, c] do not fit");
  return {x.shape()[0], x.shape()[1], x.shape()[2], x.shape()[3], y[1], y[2]};
}

}  // namespace

void CpuBackend::conv2d_forward(const Conv2dGeometry& g, ConstTensorView x, ConstTensorView w,
                                ConstTensorView b, TensorView y, std::unique_ptr<Workspace>& ws,
                                Precision p) {
  auto& cw = conv_workspace(ws);
  const ConvShape s = conv_shape(x, w, y.shape());
  make_patches(g, s, x, cw.patches);
  if (b.empty() && cw.zero_bias.size() != s.f) cw.zero_bias = Tensor(Shape{s.f});
  dense_forward(cw.patches, w.reshaped(Shape{s.kdim(), s.f}),
                b.empty() ? ConstTensorView(cw.zero_bias) : b, y.reshaped(Shape{s.rows(), s.f}), p);
}

void CpuBackend::conv2d_backward(const Conv2dGeometry& g, ConstTensorView x, ConstTensorView w,
                                 ConstTensorView dy, TensorView dw, TensorView db, TensorView dx,
                                 std::unique_ptr<Workspace>& ws, Precision p) {
  auto& cw = conv_workspace(ws);
  const ConvShape s = conv_shape(x, w, dy.shape());
  make_patches(g, s, x, cw.patches);  // from this call's x: nothing kept from the forward
  const Shape w2{s.kdim(), s.f};
  TensorView dpatches;
  if (!dx.empty()) dpatches = scratch(cw.dpatches, Shape{s.rows(), s.kdim()});
  dense_backward(cw.patches, w.reshaped(w2), dy.reshaped(Shape{s.rows(), s.f}),
                 dw.empty() ? scratch(cw.scratch_dw, w2) : dw.reshaped(w2),
                 db.empty() ? scratch(cw.scratch_db, Shape{s.f}) : db, dpatches, p);
  if (dx.empty()) return;
  const float* dp = cw.dpatches.data();
  // Images in parallel: the positions one image's patches read are that image's alone.
  parallel_for(s.n, 1, [&](int64_t b0, int64_t b1) { col2im(g, s, dp, dx.data(), b0, b1); });
}

void CpuBackend::pool2d_forward(PoolKind k, const Pool2dGeometry& g, ConstTensorView x,
                                TensorView y) {
  const auto s = pool_shape(x, y.shape());
  const bool max = k == PoolKind::max;
  parallel_for(y.size(), kPoolElementGrain, [&](int64_t o0, int64_t o1) {
    for (int64_t o = o0; o < o1; ++o)
      kernels::pool2d_forward(o, s, g, max, x.data(), y.data());
  });
}

void CpuBackend::pool2d_backward(PoolKind k, const Pool2dGeometry& g, ConstTensorView x,
                                 ConstTensorView y, ConstTensorView dy, TensorView dx) {
  const auto s = pool_shape(x, y.shape());
  const bool max = k == PoolKind::max;
  const int64_t image_in = s.h * s.w * s.c, image_out = s.oh * s.ow * s.c;
  // Images in parallel: an output's window lies in its own image.
  parallel_for(s.n, std::max<int64_t>(1, kPoolElementGrain / std::max<int64_t>(1, image_out)),
               [&](int64_t b0, int64_t b1) {
                 std::fill_n(dx.data() + b0 * image_in, (b1 - b0) * image_in, 0.0f);
                 for (int64_t o = b0 * image_out; o < b1 * image_out; ++o)
                   kernels::pool2d_backward(o, s, g, max, x.data(), y.data(), dy.data(), dx.data());
               });
}

}  // namespace troupe::core
