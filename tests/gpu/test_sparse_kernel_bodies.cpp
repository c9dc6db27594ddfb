// The sparse layers' CUDA kernel bodies that are the GPU's alone, run on the host over every
// index: the embedding scatter with atomics against the CPU's column-split one, and the
// padded copy that stands in for an uneven "same" padding (cuDNN pads both sides alike):
// a convolution of the padded copy with the even padding, and the crop of its input
// gradient, must be the convolution with the uneven padding itself (the CPU's, on both
// sides); the factorization machine's bodies against the CPU's loops along the factor axis.
// The pooling bodies are the CPU backend's own (core/kernels/).
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>

#include "against_cpu.hpp"
#include "core/cpu/cpu_backend.hpp"
#include "core/kernels/fm.hpp"
#include "core/kernels/gather_index.hpp"
#include "gpu/kernels/sparse.cuh"
#include "helpers.hpp"

using namespace troupe;
using core::Shape;
using core::Tensor;
using troupe::test::close_to_cpu;
using troupe::test::random_tensor;
using troupe::test::run_body;
namespace k = troupe::gpu::kernels;

namespace {

using troupe::test::cpu;

}  // namespace

TEST_CASE("The embedding scatter body sums repeated ids as the CPU does", "[gpu_bodies][sparse]") {
  const std::vector<int32_t> index = {2, 0, 2, 1, 2, 0};
  const core::ConstTensorView ix{index.data(), Shape{6}, core::Device::cpu(), core::DType::int32};
  // Rows of 5 floats, and of 1 (a linear term's, which the CPU adds on a path of its own).
  for (const int64_t d : {int64_t{5}, int64_t{1}}) {
    INFO("width " << d);
    const Tensor dy = random_tensor(Shape{6, d}, 1);
    Tensor want = random_tensor(Shape{3, d}, 3), got(Shape{3, d});  // overwritten, not added to
    cpu.scatter_add_index(dy, ix, want);
    run_body(dy.size(), [&](int64_t i) {
      core::kernels::scatter_add_index(i, d, dy.data(), index.data(), got.data());
    });
    close_to_cpu(got, want, 1e-6f, "row grads");
  }
  Tensor rows = random_tensor(Shape{3, 5}, 2), y(Shape{6, 5}), y_cpu(Shape{6, 5});
  cpu.gather_index(rows, ix, y_cpu);
  run_body(y.size(), [&](int64_t i) {
    core::kernels::gather_index(i, 5, rows.data(), index.data(), y.data());
  });
  close_to_cpu(y, y_cpu, 0.0f, "gathered rows");
}

TEST_CASE("The factorization machine's bodies compute what the CPU does", "[gpu_bodies][sparse]") {
  // Several widths: the CPU adds a whole factor row per field (8, 16 and 32 as vectors of
  // 8 lanes, the others in a loop), the bodies one column each.
  for (const int64_t k :
       {int64_t{1}, int64_t{4}, int64_t{8}, int64_t{13}, int64_t{16}, int64_t{32}}) {
    INFO("k " << k);
    const int64_t b = 5, fields = 7;
    const Tensor x = random_tensor(Shape{b, fields, k}, 7), dy = random_tensor(Shape{b}, 8);
    Tensor y(Shape{b}), y_cpu(Shape{b}), dx(x.shape()), dx_cpu(x.shape());
    cpu.fm_forward(x, y_cpu);
    cpu.fm_backward(x, dy, dx_cpu);
    run_body(b, [&](int64_t i) { core::kernels::fm_forward(i, fields, k, x.data(), y.data()); });
    run_body(b * k, [&](int64_t t) {
      core::kernels::fm_backward(t, fields, k, x.data(), dy.data(), dx.data());
    });
    close_to_cpu(y, y_cpu, 1e-6f, "fm forward");
    close_to_cpu(dx, dx_cpu, 1e-6f, "fm backward");
  }
}

TEST_CASE("An uneven padding as a padded copy convolves as the padding itself",
          "[gpu_bodies][sparse]") {
  // Keras's "same" for a 3x2 kernel, stride 2, on 6x6: rows pad 0 + 1, columns 0 + 0; on
  // 6x5 with stride 1 and a 4x4 kernel: 1 + 2 on each axis.
  struct Case {
    int64_t h, w, kh, kw, stride;
  };
  for (const Case& cs : {Case{6, 6, 3, 2, 2}, Case{6, 5, 4, 4, 1}}) {
    DYNAMIC_SECTION(cs.h << "x" << cs.w << " kernel " << cs.kh << "x" << cs.kw) {
      const int64_t n = 2, c = 3, f = 2;
      core::Conv2dGeometry g;
      g.stride_h = g.stride_w = cs.stride;
      core::same_padding(cs.h, cs.kh, cs.stride, g.pad_top, g.pad_bottom);
      core::same_padding(cs.w, cs.kw, cs.stride, g.pad_left, g.pad_right);
      const int64_t oh = (cs.h + cs.stride - 1) / cs.stride,
                    ow = (cs.w + cs.stride - 1) / cs.stride;
      const Tensor x = random_tensor(Shape{n, cs.h, cs.w, c}, 3);
      const Tensor w = random_tensor(Shape{cs.kh, cs.kw, c, f}, 4);
      const Tensor b = random_tensor(Shape{f}, 5), dy = random_tensor(Shape{n, oh, ow, f}, 6);
      std::unique_ptr<core::Workspace> ws1, ws2;
      Tensor y(Shape{n, oh, ow, f}), dw(w.shape()), db(b.shape()), dx(x.shape());
      cpu.conv2d_forward(g, x, w, b, y, ws1, core::Precision::float32);
      cpu.conv2d_backward(g, x, w, dy, dw, db, dx, ws1, core::Precision::float32);

      const auto split = k::split_padding(g, n, cs.h, cs.w, c);
      REQUIRE(split.pad.needed());
      core::Conv2dGeometry even = g;
      even.pad_top = even.pad_bottom = split.even_h;
      even.pad_left = even.pad_right = split.even_w;
      Tensor padded(Shape{n, split.pad.ph, split.pad.pw, c});
      run_body(padded.size(),
               [&](int64_t i) { k::pad_image(i, split.pad, x.data(), padded.data()); });
      Tensor y2(y.shape()), dw2(w.shape()), db2(b.shape()), dpadded(padded.shape()), dx2(x.shape());
      cpu.conv2d_forward(even, padded, w, b, y2, ws2, core::Precision::float32);
      cpu.conv2d_backward(even, padded, w, dy, dw2, db2, dpadded, ws2, core::Precision::float32);
      run_body(dx2.size(),
               [&](int64_t i) { k::crop_image(i, split.pad, dpadded.data(), dx2.data()); });
      close_to_cpu(y2, y, 1e-6f, "y");
      close_to_cpu(dw2, dw, 1e-6f, "dW");
      close_to_cpu(dx2, dx, 1e-6f, "dx");
    }
  }
}
