// The GPU kernels' bodies (gpu/kernels/*.cuh), run on the host over every index, against
// the CPU backend on the same inputs. These are the functions the .cu launchers run in
// grid-stride loops; what this does not check (the launches, cuBLASLt, cuDNN, streams)
// is tests/gpu/test_cuda_backend.cpp's, on a GPU.
//
// Tolerances: the bodies use expf/sqrtf one element at a time where the CPU backend uses
// Eigen's vectorized versions (and may contract into FMAs differently): 1e-6 relative for
// element-wise results; sums in another order (column sums, atomics into CTR rows) and
// optimizer states carried over steps (FTRL's linear slot subtracts nearly equal roots): 1e-5.
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <random>

#include "against_cpu.hpp"
#include "core/cpu/cpu_backend.hpp"
#include "core/half.hpp"
#include "core/optimizer.hpp"
#include "gpu/kernels/elementwise.cuh"
#include "gpu/kernels/loss.cuh"
#include "gpu/kernels/optimizer_step.hpp"
#include "helpers.hpp"

using namespace troupe;
using core::ConstTensorView;
using core::Shape;
using core::Tensor;
using troupe::test::close_to_cpu;
using troupe::test::random_tensor;
using troupe::test::run_body;
namespace k = troupe::gpu::kernels;

namespace {

using troupe::test::cpu;

ConstTensorView ints(const std::vector<int32_t>& v) {
  return {v.data(), Shape{static_cast<int64_t>(v.size())}, core::Device::cpu(), core::DType::int32};
}

ConstTensorView longs(const std::vector<int64_t>& v) {
  return {v.data(), Shape{static_cast<int64_t>(v.size())}, core::Device::cpu(), core::DType::int64};
}

}  // namespace

TEST_CASE("element-wise bodies compute what the CPU backend does", "[kernels]") {
  const Tensor x = random_tensor(Shape{37, 11}, 1, -3.0f, 3.0f);
  const Tensor dy = random_tensor(Shape{37, 11}, 2);
  Tensor y_cpu(x.shape()), y(x.shape()), dx_cpu(x.shape()), dx(x.shape());

  cpu.relu_forward(x, y_cpu);
  run_body(x.size(), [&](int64_t i) { k::relu_forward(i, x.data(), y.data()); });
  close_to_cpu(y, y_cpu, 0.0f, "relu");
  cpu.relu_backward(y_cpu, dy, dx_cpu);
  run_body(x.size(), [&](int64_t i) { k::relu_backward(i, y.data(), dy.data(), dx.data()); });
  close_to_cpu(dx, dx_cpu, 0.0f, "relu backward");

  // Column sums are the bias' gradient (the CPU backend's dense_backward computes it).
  const Tensor w = random_tensor(Shape{11, 4}, 4);
  Tensor dw(Shape{11, 4}), db_cpu(Shape{4}), db(Shape{4}), g(Shape{37, 4});
  g = random_tensor(Shape{37, 4}, 5);
  cpu.dense_backward(x, w, g, dw, db_cpu, core::TensorView(), core::Precision::float32);
  run_body(4, [&](int64_t j) { k::column_sum(j, g.data(), nullptr, db.data(), 37, 4); });
  close_to_cpu(db, db_cpu, 1e-5f, "column sums");
  // A tall matrix (cut into 4 chunks of rows, kernels::column_chunk_rows), rows weighted,
  // added to what out holds: against sums in double.
  const int64_t tall = 10000;
  REQUIRE(k::column_chunk_rows(tall, 3) == 2500);
  const Tensor t = random_tensor(Shape{tall, 3}, 7), tw = random_tensor(Shape{tall}, 8);
  Tensor sums = random_tensor(Shape{3}, 9), want(Shape{3});
  for (int64_t j = 0; j < 3; ++j) {
    double acc = sums[j];
    for (int64_t r = 0; r < tall; ++r)
      acc += static_cast<double>(tw[r]) * t[r * 3 + j];
    want[j] = static_cast<float>(acc);
  }
  run_body(3,
           [&](int64_t j) { k::column_sum(j, t.data(), tw.data(), sums.data(), tall, 3, true); });
  close_to_cpu(sums, want, 1e-5f, "weighted column sums of 10000 rows");

  Tensor bias_added = x;
  const Tensor b = random_tensor(Shape{11}, 6);
  run_body(x.size(), [&](int64_t i) { k::add_bias(i, bias_added.data(), b.data(), 11); });
  CHECK(bias_added[11 * 3 + 4] == x[11 * 3 + 4] + b[4]);

  int flag = 0;
  run_body(x.size(), [&](int64_t i) { k::check_finite(i, x.data(), &flag); });
  CHECK(flag == 0);
  Tensor bad = x;
  bad[17] = std::numeric_limits<float>::infinity();
  run_body(bad.size(), [&](int64_t i) { k::check_finite(i, bad.data(), &flag); });
  CHECK(flag == 1);
  CHECK_FALSE(cpu.all_finite({bad}));
}

TEST_CASE("conversion, transposition and gather bodies", "[kernels]") {
  const Tensor x = random_tensor(Shape{64}, 7, -1e5f, 1e5f);
  std::vector<uint16_t> h(64), h_cpu(64);
  for (int t : {1, 2}) {
    const auto dt = t == 1 ? core::DType::bfloat16 : core::DType::float16;
    run_body(64, [&](int64_t i) { k::to_half(i, x.data(), h.data(), t); });
    core::to_half(x.data(), h_cpu.data(), 64, dt);
    CHECK(h == h_cpu);
    Tensor back(Shape{64}), rounded(Shape{64});
    run_body(64, [&](int64_t i) { k::from_half(i, h.data(), back.data(), t); });
    run_body(64, [&](int64_t i) { k::round_values(i, x.data(), rounded.data(), t); });
    for (int64_t i = 0; i < 64; ++i) {
      CHECK(std::isnan(back[i]) == std::isnan(core::round_to(x[i], dt)));
      if (!std::isnan(back[i])) CHECK(back[i] == core::round_to(x[i], dt));
      if (!std::isnan(rounded[i])) CHECK(rounded[i] == back[i]);
    }
  }
  Tensor tf(Shape{64});
  run_body(64, [&](int64_t i) { k::round_values(i, x.data(), tf.data(), 3); });
  CHECK(tf[5] == core::round_tf32(x[5]));

  // HWIO [3, 3, 2, 4] -> OHWI [4, 3, 3, 2] and back.
  const Tensor hwio = random_tensor(Shape{3, 3, 2, 4}, 8);
  Tensor ohwi(Shape{4, 3, 3, 2}), again(Shape{3, 3, 2, 4});
  run_body(72, [&](int64_t i) { k::hwio_to_ohwi(i, hwio.data(), ohwi.data(), 9, 2, 4); });
  run_body(72, [&](int64_t i) { k::ohwi_to_hwio(i, ohwi.data(), again.data(), 9, 2, 4); });
  CHECK(core::max_abs_diff(hwio, again) == 0.0f);
  // Filter o at spatial (1, 2), channel 1: HWIO[(1 * 3 + 2) * 2 + 1][o].
  for (int o = 0; o < 4; ++o)
    CHECK(ohwi[((o * 9) + (1 * 3 + 2)) * 2 + 1] == hwio[((1 * 3 + 2) * 2 + 1) * 4 + o]);
}

TEST_CASE("loss and metric bodies compute what the CPU backend does", "[kernels]") {
  const int64_t n = 23, c = 10;
  const Tensor logits = random_tensor(Shape{n, c}, 11, -4.0f, 4.0f);
  std::vector<int32_t> labels(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    labels[static_cast<size_t>(i)] = static_cast<int32_t>((i * 3) % c);
  for (float scale : {1.0f, 1024.0f}) {
    Tensor p_cpu(logits.shape()), g_cpu(logits.shape()), p(logits.shape()), g(logits.shape());
    const double loss_cpu = cpu.softmax_cross_entropy(logits, ints(labels), p_cpu, g_cpu, scale);
    double sum = 0.0;
    run_body(n, [&](int64_t i) {
      k::softmax_cross_entropy(i, logits.data(), labels.data(), p.data(), g.data(), &sum, c,
                               scale / static_cast<float>(n));
    });
    CHECK(sum / static_cast<double>(n) == Approx(loss_cpu).epsilon(1e-6));
    close_to_cpu(p, p_cpu, 1e-6f, "softmax probabilities");
    close_to_cpu(g, g_cpu, 1e-6f, "softmax gradient");
  }
  unsigned long long correct = 0;
  run_body(n, [&](int64_t i) { k::count_correct(i, logits.data(), labels.data(), &correct, c); });
  CHECK(static_cast<int64_t>(correct) == cpu.count_correct(logits, ints(labels)));

  const Tensor z = random_tensor(Shape{n}, 12, -6.0f, 6.0f);
  Tensor yb(Shape{n});
  for (int64_t i = 0; i < n; ++i)
    yb[i] = static_cast<float>(i % 2);
  Tensor gb_cpu(Shape{n}), gb(Shape{n});
  const double bce_cpu = cpu.sigmoid_cross_entropy(z, yb, gb_cpu, 1.0f);
  double sum = 0.0;
  run_body(n, [&](int64_t i) {
    k::sigmoid_cross_entropy(i, z.data(), yb.data(), gb.data(), &sum, 1.0f / static_cast<float>(n));
  });
  CHECK(sum / static_cast<double>(n) == Approx(bce_cpu).epsilon(1e-6));
  close_to_cpu(gb, gb_cpu, 1e-6f, "sigmoid cross-entropy gradient");

  std::vector<int64_t> pos_cpu(200), neg_cpu(200);
  const int64_t right_cpu = cpu.binary_metrics(z, yb, pos_cpu, neg_cpu);
  std::vector<unsigned long long> pos(200), neg(200);
  unsigned long long right = 0;
  run_body(n, [&](int64_t i) {
    k::binary_metrics(i, z.data(), yb.data(), pos.data(), neg.data(), &right, 200);
  });
  CHECK(static_cast<int64_t>(right) == right_cpu);
  for (size_t b = 0; b < 200; ++b) {
    CHECK(static_cast<int64_t>(pos[b]) == pos_cpu[b]);
    CHECK(static_cast<int64_t>(neg[b]) == neg_cpu[b]);
  }
}

TEST_CASE("optimizer bodies update as core::Optimizer does, whole and by rows", "[kernels]") {
  for (const char* name : {"sgd", "momentum", "nesterov", "adagrad", "adam", "rmsprop", "ftrl"}) {
    INFO(name);
    auto opt = core::make_optimizer(name, 0.05f).value();
    const core::OptimizerConfig cfg = opt->config();
    Tensor w_cpu = random_tensor(Shape{8, 5}, 1), w = w_cpu;
    core::SlotSet s_cpu = opt->make_slots(w.shape()), s = opt->make_slots(w.shape());
    auto slot = [](core::SlotSet& set, size_t i) {
      return i < set.slots.size() ? set.slots[i].data() : nullptr;
    };
    for (int64_t t = 1; t <= 4; ++t) {
      const Tensor g = random_tensor(w.shape(), 20 + static_cast<uint64_t>(t));
      REQUIRE(opt->apply_dense(w_cpu, g, s_cpu).ok());
      const auto st = k::optimizer_step(cfg, t);
      run_body(w.size(), [&](int64_t i) {
        k::optimizer_update(st, i, i, w.data(), g.data(), slot(s, 0), slot(s, 1));
      });
    }
    close_to_cpu(w, w_cpu, 1e-5f, std::string(name) + " dense");
    for (size_t i = 0; i < s.slots.size(); ++i)
      close_to_cpu(s.slots[i], s_cpu.slots[i], 1e-5f, std::string(name) + " slot");

    const std::vector<int64_t> rows{6, 1, 3};
    const Tensor g = random_tensor(Shape{3, 5}, 40);
    REQUIRE(opt->apply_sparse(w_cpu, rows, g, s_cpu).ok());
    const auto st = k::optimizer_step(cfg, s_cpu.iterations);
    run_body(15, [&](int64_t i) {
      k::optimizer_update_row(st, i, rows.data(), 5, w.data(), g.data(), slot(s, 0), slot(s, 1));
    });
    close_to_cpu(w, w_cpu, 1e-5f, std::string(name) + " rows");
  }
}
