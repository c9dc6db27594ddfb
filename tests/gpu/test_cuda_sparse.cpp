// The CUDA backend's sparse-layer kernels on a GPU against the CPU backend on the same
// inputs: cuDNN's convolutions with strides, dilation and (uneven) padding, poolings, the
// factorization machine and an embedding call's gather and scatter. Without a GPU the
// cases say so and skip. Tolerances as tests/gpu/test_cuda_backend.cpp's: float32 products
// 1e-4, element-wise 1e-5, atomics 1e-5; TF32 convolutions within 2^-9 of the sum of their
// products' magnitudes.
#include <catch2/catch.hpp>

#include <cmath>
#include <memory>
#include <string>
#include <utility>

#include "against_cpu.hpp"
#include "core/backend.hpp"
#include "core/cpu/cpu_backend.hpp"
#include "helpers.hpp"

using namespace troupe;
using core::Device;
using core::Precision;
using core::Shape;
using core::Tensor;
using troupe::test::cuda;
using troupe::test::gpu0;
using troupe::test::gpu_close_to_cpu;
using troupe::test::have_gpu;
using troupe::test::random_tensor;

namespace {

using troupe::test::cpu;

Tensor on_gpu(const Shape& s) {
  return Tensor(s, core::DType::float32, troupe::test::gpu0);
}

Tensor absolute(const Tensor& t) {
  Tensor a = t;
  for (int64_t i = 0; i < a.size(); ++i)
    a[i] = std::fabs(a[i]);
  return a;
}

// |gpu - cpu| <= 2^-9 * sizes + 1e-6 for each element, `sizes` the sum of its products'
// magnitudes (what TF32's operand rounding can move it by).
void within_products(const Tensor& device_result, const Tensor& cpu, const Tensor& sizes,
                     const std::string& what) {
  REQUIRE(troupe::test::cuda().synchronize().ok());
  const Tensor got = device_result.to(core::Device::cpu());
  REQUIRE(got.size() == cpu.size());
  for (int64_t i = 0; i < got.size(); ++i) {
    const float bound = std::ldexp(sizes[i], -9) + 1e-6f;
    if (!(std::fabs(got[i] - cpu[i]) <= bound))
      FAIL(what << ": element " << i << " is " << got[i] << " on the GPU and " << cpu[i]
                << " on the CPU, beyond TF32's bound " << bound);
  }
}

}  // namespace

TEST_CASE("CUDA Conv2D with strides, dilation and uneven padding matches the CPU's", "[gpu]") {
  if (!have_gpu()) return;
  auto& be = cuda();
  struct Case {
    int64_t h, w, kh, kw, stride, dilation;
    bool same, bias;
  };
  for (const Case& cs :
       {Case{9, 8, 3, 3, 2, 1, true, true}, Case{8, 8, 2, 2, 1, 1, true, false},
        Case{10, 9, 3, 2, 1, 2, false, true}, Case{7, 7, 4, 3, 3, 1, true, true}}) {
    for (Precision p : {Precision::float32, Precision::tf32, Precision::mixed_bfloat16}) {
      DYNAMIC_SECTION(cs.h << "x" << cs.w << " kernel " << cs.kh << "x" << cs.kw << " stride "
                           << cs.stride << " dilation " << cs.dilation << " "
                           << core::precision_name(p)) {
        const int64_t n = 3, c = 4, f = 5;
        core::Conv2dGeometry g;
        g.stride_h = g.stride_w = cs.stride;
        g.dilation_h = g.dilation_w = cs.dilation;
        const int64_t eh = (cs.kh - 1) * cs.dilation + 1, ew = (cs.kw - 1) * cs.dilation + 1;
        if (cs.same) {
          core::same_padding(cs.h, eh, cs.stride, g.pad_top, g.pad_bottom);
          core::same_padding(cs.w, ew, cs.stride, g.pad_left, g.pad_right);
        }
        const int64_t oh = core::window_output_size(cs.h, eh, cs.stride, cs.same);
        const int64_t ow = core::window_output_size(cs.w, ew, cs.stride, cs.same);
        const Tensor x = random_tensor(Shape{n, cs.h, cs.w, c}, 1);
        const Tensor w = random_tensor(Shape{cs.kh, cs.kw, c, f}, 2);
        const Tensor b = cs.bias ? random_tensor(Shape{f}, 3) : Tensor();
        const Tensor dy = random_tensor(Shape{n, oh, ow, f}, 4);
        std::unique_ptr<core::Workspace> wc, wg;
        Tensor y(dy.shape()), dw(w.shape()), db(Shape{f}), dx(x.shape());
        cpu.conv2d_forward(g, x, w, b, y, wc, p);
        cpu.conv2d_backward(g, x, w, dy, dw, cs.bias ? core::TensorView(db) : core::TensorView(),
                            dx, wc, p);
        const Tensor xd = x.to(gpu0), wd = w.to(gpu0), dyd = dy.to(gpu0);
        const Tensor bd = cs.bias ? b.to(gpu0) : Tensor();
        Tensor yd = on_gpu(y.shape()), dwd = on_gpu(w.shape()), dbd = on_gpu(Shape{f}),
               dxd = on_gpu(x.shape());
        be.conv2d_forward(g, xd, wd, bd, yd, wg, p);
        be.conv2d_backward(g, xd, wd, dyd, dwd,
                           cs.bias ? core::TensorView(dbd) : core::TensorView(), dxd, wg, p);
        if (cs.bias) gpu_close_to_cpu(dbd, db, 1e-4f, "db");
        if (p != Precision::tf32) {
          const float tol = p == Precision::float32 ? 1e-4f : 1e-3f;
          gpu_close_to_cpu(yd, y, tol, "y");
          gpu_close_to_cpu(dwd, dw, tol, "dW");
          gpu_close_to_cpu(dxd, dx, tol, "dx");
        } else {
          // TF32 tensor cores read the first 10 mantissa bits of each operand (truncated;
          // the CPU rounds to nearest): each product is off by up to 2^-9 of its size, so
          // a sum is bounded by 2^-9 times the sum of its products' sizes, which grows with
          // the terms summed: the same convolution of |x|, |w| and |dy|, in float32.
          const Tensor ax = absolute(x), aw = absolute(w), ady = absolute(dy);
          Tensor ay(y.shape()), adw(w.shape()), adx(x.shape());
          std::unique_ptr<core::Workspace> wa;
          cpu.conv2d_forward(g, ax, aw, Tensor(), ay, wa, Precision::float32);
          cpu.conv2d_backward(g, ax, aw, ady, adw, core::TensorView(), adx, wa, Precision::float32);
          within_products(yd, y, ay, "y");
          within_products(dwd, dw, adw, "dW");
          within_products(dxd, dx, adx, "dx");
        }
      }
    }
  }
}

TEST_CASE("CUDA pooling, FM and embedding gathers match the CPU's", "[gpu]") {
  if (!have_gpu()) return;
  auto& be = cuda();
  const Tensor x = random_tensor(Shape{3, 7, 6, 4}, 5);
  for (core::PoolKind kind : {core::PoolKind::max, core::PoolKind::average}) {
    core::Pool2dGeometry g;
    g.pool_h = 3;
    g.pool_w = 2;
    g.stride_h = 2;
    g.stride_w = 1;
    core::same_padding(7, 3, 2, g.pad_top, g.pad_bottom);
    core::same_padding(6, 2, 1, g.pad_left, g.pad_right);
    const Shape ys{3, 4, 6, 4};
    const Tensor dy = random_tensor(ys, 6);
    Tensor y(ys), dx(x.shape());
    cpu.pool2d_forward(kind, g, x, y);
    cpu.pool2d_backward(kind, g, x, y, dy, dx);
    const Tensor xd = x.to(gpu0), dyd = dy.to(gpu0);
    Tensor yd = on_gpu(ys), dxd = on_gpu(x.shape());
    be.pool2d_forward(kind, g, xd, yd);
    be.pool2d_backward(kind, g, xd, yd, dyd, dxd);
    gpu_close_to_cpu(yd, y, 1e-6f, "pool y");
    gpu_close_to_cpu(dxd, dx, 1e-5f, "pool dx");
  }
  const Tensor e = random_tensor(Shape{50, 6, 8}, 7), dfm = random_tensor(Shape{50, 1}, 8);
  Tensor fy(Shape{50, 1}), fdx(e.shape());
  cpu.fm_forward(e, fy);
  cpu.fm_backward(e, dfm, fdx);
  Tensor fyd = on_gpu(fy.shape()), fdxd = on_gpu(e.shape());
  const Tensor ed = e.to(gpu0), dfmd = dfm.to(gpu0);
  be.fm_forward(ed, fyd);
  be.fm_backward(ed, dfmd, fdxd);
  gpu_close_to_cpu(fyd, fy, 1e-5f, "fm y");
  gpu_close_to_cpu(fdxd, fdx, 1e-5f, "fm dx");

  std::vector<int32_t> index(40);
  for (size_t i = 0; i < index.size(); ++i)
    index[i] = static_cast<int32_t>((i * 7) % 9);
  Tensor ix(Shape{40}, core::DType::int32, Device::cpu());
  std::copy(index.begin(), index.end(), ix.data_as<int32_t>());
  const Tensor rows = random_tensor(Shape{9, 16}, 9), dy = random_tensor(Shape{40, 16}, 10);
  Tensor y(Shape{40, 16}), grads(Shape{9, 16});
  cpu.gather_index(rows, ix, y);
  cpu.scatter_add_index(dy, ix, grads);
  const Tensor rowsd = rows.to(gpu0), ixd = ix.to(gpu0), dyd = dy.to(gpu0);
  Tensor yd = on_gpu(y.shape()), gradsd = on_gpu(grads.shape());
  be.gather_index(rowsd, ixd, yd);
  be.scatter_add_index(dyd, ixd, gradsd);
  gpu_close_to_cpu(yd, y, 0.0f, "gathered rows");
  gpu_close_to_cpu(gradsd, grads, 1e-5f, "row grads");
}

TEST_CASE("CUDA column reductions of tall and wide matrices match the CPU's", "[gpu]") {
  if (!have_gpu()) return;
  auto& be = cuda();
  // 10000 x 3 is cut into chunks of rows (gpu/kernels/hd.cuh), 100 x 70 is one chunk of
  // three column tiles: column sums, batch moments, batch and layer normalization's
  // parameter gradients.
  for (auto [r, c] : {std::pair<int64_t, int64_t>{10000, 3}, {100, 70}}) {
    DYNAMIC_SECTION(r << "x" << c) {
      const Tensor x = random_tensor(Shape{r, c}, 21), dy = random_tensor(Shape{r, c}, 22);
      const Tensor gamma = random_tensor(Shape{c}, 23), beta = random_tensor(Shape{c}, 24);
      const Tensor xd = x.to(gpu0), dyd = dy.to(gpu0), gd = gamma.to(gpu0), bd = beta.to(gpu0);
      Tensor sums = random_tensor(Shape{c}, 25);
      Tensor sumsd = sums.to(gpu0);
      cpu.column_sums(x, sums, true);
      be.column_sums(xd, sumsd, true);
      gpu_close_to_cpu(sumsd, sums, 1e-5f, "column_sums");

      Tensor mean(Shape{c}), var(Shape{c});
      Tensor meand = on_gpu(Shape{c}), vard = on_gpu(Shape{c});
      cpu.moments(x, mean, var);
      be.moments(xd, meand, vard);
      gpu_close_to_cpu(meand, mean, 1e-5f, "mean");
      gpu_close_to_cpu(vard, var, 1e-5f, "var");

      Tensor dx(x.shape()), dg(Shape{c}), db(Shape{c});
      Tensor dxd = on_gpu(x.shape()), dgd = on_gpu(Shape{c}), dbd = on_gpu(Shape{c});
      cpu.batch_norm_backward(x, mean, var, gamma, 1e-3f, true, dy, dx, dg, db);
      be.batch_norm_backward(xd, mean.to(gpu0), var.to(gpu0), gd, 1e-3f, true, dyd, dxd, dgd, dbd);
      gpu_close_to_cpu(dgd, dg, 1e-4f, "batch norm dgamma");
      gpu_close_to_cpu(dbd, db, 1e-5f, "batch norm dbeta");
      gpu_close_to_cpu(dxd, dx, 1e-4f, "batch norm dx");

      Tensor y(x.shape()), rm(Shape{r}), rs(Shape{r});
      Tensor yd = on_gpu(x.shape()), rmd = on_gpu(Shape{r}), rsd = on_gpu(Shape{r});
      cpu.layer_norm_forward(x, gamma, beta, 1e-3f, y, rm, rs);
      be.layer_norm_forward(xd, gd, bd, 1e-3f, yd, rmd, rsd);
      gpu_close_to_cpu(yd, y, 1e-4f, "layer norm y");
      cpu.layer_norm_backward(x, gamma, rm, rs, dy, dx, dg, db);
      be.layer_norm_backward(xd, gd, rm.to(gpu0), rs.to(gpu0), dyd, dxd, dgd, dbd);
      gpu_close_to_cpu(dgd, dg, 1e-4f, "layer norm dgamma");
      gpu_close_to_cpu(dbd, db, 1e-5f, "layer norm dbeta");
      gpu_close_to_cpu(dxd, dx, 1e-4f, "layer norm dx");
    }
  }
}
