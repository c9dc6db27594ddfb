// The kernels of the layer group "basic" (core/backend.hpp, "Kernels of the layer graph"):
// the CPU backend's on small inputs worked out by hand, and the CUDA kernels' bodies
// (gpu/kernels/layer_ops.cuh) run on the host over every index against the CPU backend,
// as tests/gpu/test_kernel_bodies.cpp does for the older kernels. What this cannot check
// (the launches themselves) needs a GPU.
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <string>

#include "core/cpu/cpu_backend.hpp"
#include "gpu/kernels/elementwise.cuh"
#include "gpu/kernels/layer_ops.cuh"

using namespace troupe::core;
namespace k = troupe::gpu::kernels;

namespace {

CpuBackend cpu;

Tensor random(Shape shape, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  Tensor t(shape);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  for (int64_t i = 0; i < t.size(); ++i)
    t[i] = d(rng);
  return t;
}

void run(int64_t n, const std::function<void(int64_t)>& body) {
  for (int64_t i = 0; i < n; ++i)
    body(i);
}

// Element-wise agreement within `rel` of the larger magnitude (at least 1).
void close(const Tensor& a, const Tensor& b, float rel, const std::string& what) {
  REQUIRE(a.size() == b.size());
  for (int64_t i = 0; i < a.size(); ++i) {
    const float tol = rel * std::max(1.0f, std::max(std::fabs(a[i]), std::fabs(b[i])));
    if (!(std::fabs(a[i] - b[i]) <= tol))
      FAIL(what << ": element " << i << " is " << a[i] << " here and " << b[i] << " on the CPU");
  }
}

const ActFn kElementwise[] = {ActFn::linear, ActFn::relu,       ActFn::sigmoid,
                              ActFn::tanh,   ActFn::gelu,       ActFn::gelu_tanh,
                              ActFn::silu,   ActFn::softplus,   ActFn::elu,
                              ActFn::selu,   ActFn::leaky_relu, ActFn::exponential};

}  // namespace

TEST_CASE("CPU layer kernels on small inputs", "[kernels][basic]") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  SECTION("axpby does not read y when b is 0; multiply accumulates") {
    Tensor x(Shape{3}, {1, 2, 3}), y(Shape{3}, {nan, nan, nan});
    cpu.axpby(2.0f, x, 0.0f, y);
    CHECK(y[0] == 2.0f);
    CHECK(y[2] == 6.0f);
    cpu.axpby(1.0f, x, -1.0f, y);
    CHECK(y[1] == -2.0f);
    cpu.multiply(x, x, y, true);
    CHECK(y[1] == 2.0f);  // -2 + 4
  }
  SECTION("columns are copied into, added to and taken from a wider matrix") {
    Tensor src(Shape{2, 2}, {1, 2, 3, 4}), dst(Shape{2, 3}, std::vector<float>(6, 0.5f));
    cpu.copy_columns(src, dst, 1, false);
    CHECK(dst[0] == 0.5f);
    CHECK(dst[1] == 1.0f);
    CHECK(dst[5] == 4.0f);
    cpu.copy_columns(src, dst, 1, true);
    CHECK(dst[4] == 6.0f);
    Tensor back(Shape{2, 1});
    cpu.take_columns(dst, 2, back);
    CHECK(back[0] == 4.0f);
    CHECK(back[1] == 8.0f);
  }
  SECTION("reductions over the middle axis, and the max's gradient to the first maximum") {
    Tensor x(Shape{1, 3, 2}, {1, 5, 4, 5, 4, 0});
    Tensor y(Shape{1, 2}), dx(Shape{1, 3, 2}), dy(Shape{1, 2}, {10, 20});
    cpu.reduce_middle(Reduce::max, x, y);
    CHECK(y[0] == 4.0f);
    CHECK(y[1] == 5.0f);
    cpu.reduce_middle_backward(Reduce::max, x, y, dy, dx);
    const float want[] = {0, 20, 10, 0, 0, 0};
    for (int i = 0; i < 6; ++i)
      CHECK(dx[i] == want[i]);
    cpu.reduce_middle(Reduce::mean, x, y);
    CHECK(y[0] == Approx(3.0f));
    cpu.reduce_middle_backward(Reduce::mean, x, y, dy, dx);
    CHECK(dx[4] == Approx(10.0f / 3));
    cpu.reduce_middle(Reduce::sum, x, y);
    CHECK(y[1] == 10.0f);
    // One value per position (a linear term's [batch, fields, 1]) takes its own path.
    Tensor x1(Shape{2, 3, 1}, {1, 5, 4, -2, -7, 3}), y1(Shape{2, 1}), dx1(Shape{2, 3, 1});
    Tensor dy1(Shape{2, 1}, {6, 9});
    cpu.reduce_middle(Reduce::max, x1, y1);
    CHECK(y1[0] == 5.0f);
    CHECK(y1[1] == 3.0f);
    cpu.reduce_middle(Reduce::sum, x1, y1);
    CHECK(y1[0] == 10.0f);
    CHECK(y1[1] == -6.0f);
    cpu.reduce_middle(Reduce::mean, x1, y1);
    CHECK(y1[1] == Approx(-2.0f));
    cpu.reduce_middle_backward(Reduce::mean, x1, y1, dy1, dx1);
    CHECK(dx1[0] == Approx(2.0f));
    CHECK(dx1[5] == Approx(3.0f));
    cpu.reduce_middle_backward(Reduce::sum, x1, y1, dy1, dx1);
    CHECK(dx1[2] == 6.0f);
    CHECK(dx1[3] == 9.0f);
  }
  SECTION("row dots, row scaling and column sums") {
    Tensor a(Shape{2, 2}, {1, 2, 3, 4}), b(Shape{2, 2}, {5, 6, 7, 8}), r(Shape{2});
    cpu.row_dot(a, b, r);
    CHECK(r[0] == 17.0f);
    CHECK(r[1] == 53.0f);
    Tensor s(Shape{2}, {2, -1}), y(Shape{2, 2}, {1, 1, 1, 1});
    cpu.scale_rows(a, s, y, true);
    CHECK(y[1] == 5.0f);
    CHECK(y[3] == -3.0f);
    Tensor c(Shape{2}, {100, 100});
    cpu.column_sums(a, c, false);
    CHECK(c[0] == 4.0f);
    cpu.column_sums(a, c, true);
    CHECK(c[1] == 12.0f);
  }
  SECTION("moments are the mean and the biased variance per column") {
    Tensor x(Shape{4, 2}, {1, 0, 2, 0, 3, 4, 6, 4}), m(Shape{2}), v(Shape{2});
    cpu.moments(x, m, v);
    CHECK(m[0] == 3.0f);
    CHECK(m[1] == 2.0f);
    CHECK(v[0] == 3.5f);
    CHECK(v[1] == 4.0f);
  }
  SECTION("dropout keeps about 1 - rate, scaled, and its backward finds the same mask") {
    Tensor x(Shape{10000}, 2.0f), y(Shape{10000}), dx(Shape{10000});
    cpu.dropout_forward(x, y, 0.4f, 17);
    cpu.dropout_backward(x, dx, 0.4f, 17);
    int64_t kept = 0;
    for (int64_t i = 0; i < y.size(); ++i) {
      REQUIRE(y[i] == dx[i]);
      if (y[i] != 0.0f) {
        ++kept;
        REQUIRE(y[i] == Approx(2.0f / 0.6f));
      }
    }
    CHECK(kept > 5800);
    CHECK(kept < 6200);
    cpu.dropout_forward(x, y, 1.0f, 17);
    CHECK(y.matrix().cwiseAbs().maxCoeff() == 0.0f);
  }
  SECTION("activation_backward may write into dy") {
    Tensor x(Shape{1, 3}, {-1, 0.5f, 2}), y(Shape{1, 3}), dy(Shape{1, 3}, {1, 1, 1});
    cpu.activation_forward(ActFn::softmax, x, y);
    cpu.activation_backward(ActFn::softmax, x, y, dy, dy);  // softmax of a constant: 0
    CHECK(std::fabs(dy[0]) < 1e-7f);
    Tensor dz(Shape{1, 3}, {1, 1, 1});
    cpu.activation_backward(ActFn::leaky_relu, x, y, dz, dz);
    CHECK(dz[0] == Approx(0.2f));
    CHECK(dz[2] == 1.0f);
  }
}

TEST_CASE("Layer kernel bodies compute what the CPU backend does", "[kernels][basic]") {
  const Tensor x = random(Shape{37, 11}, 1, -3.0f, 3.0f);
  const Tensor dy = random(Shape{37, 11}, 2);
  const int64_t n = x.size(), r = 37, c = 11;
  Tensor y_cpu(x.shape()), y(x.shape()), dx_cpu(x.shape()), dx(x.shape());

  for (ActFn f : kElementwise) {
    INFO("activation " << static_cast<int>(f));
    cpu.activation_forward(f, x, y_cpu);
    run(n, [&](int64_t i) { k::activation_forward(i, f, x.data(), y.data()); });
    close(y, y_cpu, 1e-6f, "activation");
    cpu.activation_backward(f, x, y_cpu, dy, dx_cpu);
    run(n, [&](int64_t i) {
      k::activation_backward(i, f, x.data(), y_cpu.data(), dy.data(), dx.data());
    });
    close(dx, dx_cpu, 1e-6f, "activation backward");
  }
  cpu.activation_forward(ActFn::softmax, x, y_cpu);
  run(r, [&](int64_t i) { k::softmax_forward(i, x.data(), y.data(), c); });
  close(y, y_cpu, 1e-6f, "softmax");
  cpu.activation_backward(ActFn::softmax, x, y_cpu, dy, dx_cpu);
  run(r, [&](int64_t i) { k::softmax_backward(i, y_cpu.data(), dy.data(), dx.data(), c); });
  close(dx, dx_cpu, 1e-6f, "softmax backward");

  y_cpu = dy;
  y = dy;
  cpu.axpby(0.5f, x, -2.0f, y_cpu);
  run(n, [&](int64_t i) { k::axpby(i, 0.5f, x.data(), -2.0f, y.data()); });
  close(y, y_cpu, 1e-6f, "axpby");
  cpu.multiply(x, dy, y_cpu, true);
  run(n, [&](int64_t i) { k::multiply(i, x.data(), dy.data(), y.data(), true); });
  close(y, y_cpu, 1e-6f, "multiply");

  // x [37, 11] into columns 3.. of [37, 20], and back.
  Tensor wide_cpu = random(Shape{r, 20}, 3), wide = wide_cpu;
  cpu.copy_columns(x, wide_cpu, 3, true);
  run(n, [&](int64_t i) { k::copy_columns(i, x.data(), wide.data(), c, 20, 3, true); });
  close(wide, wide_cpu, 0.0f, "copy_columns");
  Tensor part_cpu(Shape{r, 5}), part(Shape{r, 5});
  cpu.take_columns(wide_cpu, 7, part_cpu);
  run(r * 5, [&](int64_t i) { k::take_columns(i, wide.data(), part.data(), 5, 20, 7); });
  close(part, part_cpu, 0.0f, "take_columns");

  // [a=4, m=9, c=5], with a repeated maximum.
  Tensor cube = random(Shape{4, 9, 5}, 4);
  cube[5 * 2 + 1] = 5.0f;
  cube[5 * 6 + 1] = 5.0f;
  for (Reduce op : {Reduce::sum, Reduce::mean, Reduce::max}) {
    INFO("reduce " << static_cast<int>(op));
    Tensor red_cpu(Shape{4, 5}), red(Shape{4, 5});
    cpu.reduce_middle(op, cube, red_cpu);
    run(20, [&](int64_t i) { k::reduce_middle(i, op, cube.data(), red.data(), 9, 5); });
    close(red, red_cpu, 1e-6f, "reduce_middle");
    const Tensor g = random(Shape{4, 5}, 5);
    Tensor d_cpu(cube.shape()), d(cube.shape());
    cpu.reduce_middle_backward(op, cube, red_cpu, g, d_cpu);
    run(20, [&](int64_t i) {
      k::reduce_middle_backward(i, op, cube.data(), red_cpu.data(), g.data(), d.data(), 9, 5);
    });
    close(d, d_cpu, 1e-6f, "reduce_middle_backward");
  }

  Tensor rows_cpu(Shape{r}), rows(Shape{r});
  cpu.row_dot(x, dy, rows_cpu);
  run(r, [&](int64_t i) { k::row_dot(i, x.data(), dy.data(), rows.data(), c); });
  close(rows, rows_cpu, 1e-6f, "row_dot");
  y_cpu = dy;
  y = dy;
  cpu.scale_rows(x, rows_cpu, y_cpu, true);
  run(n, [&](int64_t i) { k::scale_rows(i, x.data(), rows_cpu.data(), y.data(), c, true); });
  close(y, y_cpu, 1e-6f, "scale_rows");
  Tensor cols_cpu = random(Shape{c}, 6), cols = cols_cpu;
  cpu.column_sums(x, cols_cpu, true);
  run(c, [&](int64_t j) { k::column_sum(j, x.data(), nullptr, cols.data(), r, c, true); });
  close(cols, cols_cpu, 1e-5f, "column_sums");
}

TEST_CASE("Normalization and dropout bodies compute what the CPU backend does",
          "[kernels][basic]") {
  const int64_t r = 97, c = 13, n = r * c;  // rows: 3 or 4 in each of the 32 column lanes
  const Tensor x = random(Shape{r, c}, 11, -2.0f, 3.0f);
  const Tensor dy = random(Shape{r, c}, 12);
  const Tensor gamma = random(Shape{c}, 13, 0.5f, 2.0f), beta = random(Shape{c}, 14);
  const float eps = 1e-3f;

  Tensor mean_cpu(Shape{c}), var_cpu(Shape{c}), mean(Shape{c}), var(Shape{c});
  cpu.moments(x, mean_cpu, var_cpu);
  run(c, [&](int64_t j) { k::moments(j, x.data(), mean.data(), var.data(), r, c); });
  close(mean, mean_cpu, 1e-6f, "moments' mean");
  close(var, var_cpu, 1e-6f, "moments' variance");

  for (bool affine : {true, false}) {
    INFO("gamma and beta: " << affine);
    const float* g = affine ? gamma.data() : nullptr;
    const float* b = affine ? beta.data() : nullptr;
    const ConstTensorView gv = affine ? ConstTensorView(gamma) : ConstTensorView();
    const ConstTensorView bv = affine ? ConstTensorView(beta) : ConstTensorView();
    Tensor y_cpu(x.shape()), y(x.shape());
    cpu.batch_norm_forward(x, mean_cpu, var_cpu, gv, bv, eps, y_cpu);
    run(n, [&](int64_t i) {
      k::batch_norm_forward(i, x.data(), mean_cpu.data(), var_cpu.data(), g, b, eps, y.data(), c);
    });
    close(y, y_cpu, 1e-6f, "batch_norm_forward");
    for (bool batch_stats : {true, false}) {
      INFO("batch statistics: " << batch_stats);
      Tensor dx_cpu(x.shape()), dg_cpu(Shape{c}), db_cpu(Shape{c});
      cpu.batch_norm_backward(x, mean_cpu, var_cpu, gv, eps, batch_stats, dy, dx_cpu, dg_cpu,
                              db_cpu);
      Tensor sum_dy(Shape{c}), sum_dy_xhat(Shape{c}), dx(x.shape());
      run(c, [&](int64_t j) {
        k::batch_norm_sums(j, x.data(), mean_cpu.data(), var_cpu.data(), eps, dy.data(),
                           sum_dy.data(), sum_dy_xhat.data(), r, c);
      });
      run(n, [&](int64_t i) {
        k::batch_norm_dx(i, x.data(), mean_cpu.data(), var_cpu.data(), g, eps, batch_stats,
                         dy.data(), sum_dy.data(), sum_dy_xhat.data(), dx.data(), r, c);
      });
      close(sum_dy, db_cpu, 1e-5f, "batch norm dbeta");
      close(sum_dy_xhat, dg_cpu, 1e-5f, "batch norm dgamma");
      close(dx, dx_cpu, 1e-5f, "batch norm dx");
    }

    Tensor lm_cpu(Shape{r}), lr_cpu(Shape{r}), lm(Shape{r}), lr(Shape{r});
    cpu.layer_norm_forward(x, gv, bv, eps, y_cpu, lm_cpu, lr_cpu);
    run(r, [&](int64_t i) {
      k::layer_norm_forward(i, x.data(), g, b, eps, y.data(), lm.data(), lr.data(), c);
    });
    close(y, y_cpu, 1e-6f, "layer_norm_forward");
    close(lr, lr_cpu, 1e-6f, "layer norm rstd");
    Tensor dx_cpu(x.shape()), dg_cpu(Shape{c}), db_cpu(Shape{c}), dx(x.shape()), dg(Shape{c}),
        db(Shape{c});
    cpu.layer_norm_backward(x, gv, lm_cpu, lr_cpu, dy, dx_cpu, dg_cpu, db_cpu);
    run(r, [&](int64_t i) {
      k::layer_norm_backward(i, x.data(), g, lm_cpu.data(), lr_cpu.data(), dy.data(), dx.data(), c);
    });
    run(c, [&](int64_t j) {
      k::layer_norm_param_grads(j, x.data(), lm_cpu.data(), lr_cpu.data(), dy.data(), dg.data(),
                                db.data(), r, c);
    });
    close(dx, dx_cpu, 1e-5f, "layer norm dx");
    close(dg, dg_cpu, 1e-5f, "layer norm dgamma");
    close(db, db_cpu, 1e-5f, "layer norm dbeta");
  }

  Tensor y_cpu(x.shape()), y(x.shape());
  cpu.dropout_forward(x, y_cpu, 0.3f, 123);
  run(n, [&](int64_t i) { k::dropout(i, x.data(), y.data(), 0.3f, 123); });
  close(y, y_cpu, 0.0f, "dropout");
}
