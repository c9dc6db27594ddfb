// The CUDA backend on a GPU, every kernel against the CPU backend on the same inputs, a
// gradient check on the device, training parity and the memory pool. Without a GPU (CI)
// the GPU cases say so and skip; the no-GPU case checks what a user asking for one hears.
//
// Tolerances, relative to the larger magnitude (and at least 1):
//   float32 element-wise and losses        1e-5  (expf/sqrtf vs the CPU's vectorized ones)
//   float32 products (cuBLASLt, cuDNN)     1e-4  (another summation order over k <= 21632)
//   tf32                                   2e-3  (tensor cores may truncate, the reference
//                                                 rounds to nearest; 10-bit mantissa)
//   bfloat16 / float16 operands            1e-3  (the same rounded operands on both sides;
//                                                 float32 accumulation in another order)
//   atomics (CTR rows, histograms)         1e-5, histograms exact
#include <catch2/catch.hpp>

#include <cuda_runtime_api.h>

#include <cmath>
#include <random>

#include "against_cpu.hpp"
#include "core/backend.hpp"
#include "core/cpu/cpu_backend.hpp"
#include "core/half.hpp"
#include "core/keras/classifier_graph.hpp"
#include "core/keras/classifier_trainer.hpp"
#include "core/keras/ctr_graph.hpp"
#include "core/nn/ctr_model.hpp"
#include "gpu/cuda.hpp"
#include "gpu/cuda_devices.hpp"
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

Tensor host(const Tensor& t) {
  REQUIRE(cuda().synchronize().ok());
  return t.to(Device::cpu());
}

}  // namespace

TEST_CASE("without a GPU, asking for one is an error naming the device and what was found",
          "[gpu]") {
  gpu::register_cuda_devices();
  if (gpu::device_count() > 0) {
    WARN("a GPU is present: the no-GPU error path is not exercised here");
    return;
  }
  for (const char* request : {"cuda", "cuda:0", "cuda:3"}) {
    auto d = core::select_device(core::parse_device(request).value(), 0);
    REQUIRE_FALSE(d.ok());
    CHECK(d.error().code == core::Errc::invalid_argument);
    CHECK_THAT(d.error().message, Catch::Contains(std::string("device ") + request) &&
                                      Catch::Contains("no CUDA device") &&
                                      Catch::Contains("cudaGetDeviceCount"));
  }
  CHECK_FALSE(core::backend_for(gpu0).ok());
}

TEST_CASE("CUDA copies round-trip through staging and pinned memory, fills and conversions",
          "[gpu]") {
  if (!have_gpu()) return;
  auto& be = cuda();
  // Larger than two staging buffers: chunked both ways.
  const Tensor big = random_tensor(Shape{5, 1 << 20}, 1);
  const Tensor on = big.to(gpu0);
  CHECK(core::max_abs_diff(host(on), big) == 0.0f);
  auto pinned = be.allocate_host(64 * sizeof(float));
  auto* p = static_cast<float*>(pinned.get());
  for (int i = 0; i < 64; ++i)
    p[i] = static_cast<float>(i);
  Tensor d(Shape{64}, core::DType::float32, gpu0);
  core::copy(core::ConstTensorView(p, Shape{64}), d);
  REQUIRE(be.synchronize().ok());
  CHECK(host(d)[63] == 63.0f);
  for (auto t : {core::DType::float32, core::DType::bfloat16, core::DType::float16,
                 core::DType::int32, core::DType::int64}) {
    Tensor f(Shape{33}, t, gpu0);
    f.fill(3.0f);
    const Tensor back = f.to(Device::cpu());
    REQUIRE(be.synchronize().ok());
    if (t == core::DType::float32) CHECK(back[32] == 3.0f);
    if (t == core::DType::bfloat16) CHECK(back.data_as<uint16_t>()[32] == core::float_to_bf16(3));
    if (t == core::DType::int64) CHECK(back.data_as<int64_t>()[32] == 3);
  }
  const Tensor x = random_tensor(Shape{1000}, 2, -1e5f, 1e5f);
  const Tensor xd = x.to(gpu0);
  for (auto t : {core::DType::bfloat16, core::DType::float16}) {
    Tensor h(Shape{1000}, t, gpu0), back(Shape{1000}, core::DType::float32, gpu0);
    be.convert(xd, h);
    be.convert(h, back);
    const Tensor r = host(back);
    for (int64_t i = 0; i < 1000; ++i)
      CHECK(r[i] == core::round_to(x[i], t));
  }
}

TEST_CASE("a failed CUDA call is reported by synchronize, naming it", "[gpu]") {
  if (!have_gpu()) return;
  auto& be = cuda();
  // A device-to-device copy between addresses no allocation holds: the runtime refuses it
  // (an upload would stage the bytes through host memory first and read past its source).
  be.copy(reinterpret_cast<void*>(0x10), gpu0, reinterpret_cast<const void*>(0x20), gpu0,
          1ull << 40);
  auto st = be.synchronize();
  REQUIRE_FALSE(st.ok());
  CHECK_THAT(st.error().message, Catch::Contains("cudaMemcpyAsync") && Catch::Contains("cuda:0"));
  CHECK(be.synchronize().ok());  // reported once; the backend carries on
}

TEST_CASE("CUDA Dense products match the CPU's in every precision", "[gpu]") {
  if (!have_gpu()) return;
  auto& be = cuda();
  for (auto [n, in, out] :
       {std::tuple<int64_t, int64_t, int64_t>{128, 784, 128}, {64, 128, 10}, {1024, 400, 400}}) {
    const Tensor x = random_tensor(Shape{n, in}, 1),
                 w = random_tensor(Shape{in, out}, 2, -0.1f, 0.1f),
                 b = random_tensor(Shape{out}, 3), dy = random_tensor(Shape{n, out}, 4);
    for (auto [p, tol] : {std::pair<Precision, float>{Precision::float32, 1e-4f},
                          {Precision::tf32, 2e-3f},
                          {Precision::mixed_bfloat16, 1e-3f},
                          {Precision::mixed_float16, 1e-3f}}) {
      INFO(n << "x" << in << "x" << out << " " << core::precision_name(p));
      Tensor y(Shape{n, out}), dw(w.shape()), db(b.shape()), dx(x.shape());
      cpu.dense_forward(x, w, b, y, p);
      cpu.dense_backward(x, w, dy, dw, db, dx, p);
      const Tensor xd = x.to(gpu0), wd = w.to(gpu0), bd = b.to(gpu0), dyd = dy.to(gpu0);
      Tensor yd(y.shape(), core::DType::float32, gpu0), dwd(w.shape(), core::DType::float32, gpu0),
          dbd(b.shape(), core::DType::float32, gpu0), dxd(x.shape(), core::DType::float32, gpu0);
      be.dense_forward(xd, wd, bd, yd, p);
      be.dense_backward(xd, wd, dyd, dwd, dbd, dxd, p);
      gpu_close_to_cpu(yd, y, tol, "y");
      gpu_close_to_cpu(dwd, dw, tol, "dW");
      gpu_close_to_cpu(dbd, db, 1e-5f, "db");
      gpu_close_to_cpu(dxd, dx, tol, "dx");
    }
  }
}

TEST_CASE("CUDA Conv2D (cuDNN) matches the CPU's im2col convolution", "[gpu]") {
  if (!have_gpu()) return;
  auto& be = cuda();
  const Tensor x = random_tensor(Shape{8, 28, 28, 1}, 1), w = random_tensor(Shape{3, 3, 1, 32}, 2),
               b = random_tensor(Shape{32}, 3), dy = random_tensor(Shape{8, 26, 26, 32}, 4);
  for (Precision p : {Precision::float32, Precision::mixed_bfloat16}) {
    INFO(core::precision_name(p));
    std::unique_ptr<core::Workspace> wc, wg;
    Tensor y(dy.shape()), dw(w.shape()), db(b.shape()), dx(x.shape());
    const core::Conv2dGeometry valid;  // stride 1, no padding
    cpu.conv2d_forward(valid, x, w, b, y, wc, p);
    cpu.conv2d_backward(valid, x, w, dy, dw, db, dx, wc, p);
    const Tensor xd = x.to(gpu0), wd = w.to(gpu0), bd = b.to(gpu0), dyd = dy.to(gpu0);
    Tensor yd(y.shape(), core::DType::float32, gpu0), dwd(w.shape(), core::DType::float32, gpu0),
        dbd(b.shape(), core::DType::float32, gpu0), dxd(x.shape(), core::DType::float32, gpu0);
    be.conv2d_forward(valid, xd, wd, bd, yd, wg, p);
    be.conv2d_backward(valid, xd, wd, dyd, dwd, dbd, dxd, wg, p);
    gpu_close_to_cpu(yd, y, 1e-4f, "conv y");
    gpu_close_to_cpu(dwd, dw, 1e-4f, "conv dW");
    gpu_close_to_cpu(dbd, db, 1e-4f, "conv db");
    gpu_close_to_cpu(dxd, dx, 1e-4f, "conv dx");
  }
}

TEST_CASE("CUDA element-wise layers, losses, metrics and optimizers match the CPU's", "[gpu]") {
  if (!have_gpu()) return;
  auto& be = cuda();
  const Tensor x = random_tensor(Shape{300, 10}, 1, -4.0f, 4.0f), dy = random_tensor(x.shape(), 2);
  const Tensor xd = x.to(gpu0), dyd = dy.to(gpu0);
  Tensor y(x.shape()), yd(x.shape(), core::DType::float32, gpu0);
  cpu.relu_forward(x, y);
  be.relu_forward(xd, yd);
  gpu_close_to_cpu(yd, y, 0.0f, "relu");
  Tensor dx(x.shape()), dxd(x.shape(), core::DType::float32, gpu0);
  cpu.activation_forward(core::ActFn::sigmoid, x, y);
  be.activation_forward(core::ActFn::sigmoid, xd, yd);
  gpu_close_to_cpu(yd, y, 1e-5f, "sigmoid");
  cpu.activation_backward(core::ActFn::sigmoid, x, y, dy, dx);
  be.activation_backward(core::ActFn::sigmoid, xd, yd, dyd, dxd);
  gpu_close_to_cpu(dxd, dx, 1e-5f, "sigmoid backward");
  CHECK(be.all_finite({xd, dyd}));
  Tensor inf = x;
  inf[123] = std::numeric_limits<float>::infinity();
  CHECK_FALSE(be.all_finite({xd, inf.to(gpu0)}));

  std::vector<int32_t> labels(300);
  for (size_t i = 0; i < labels.size(); ++i)
    labels[i] = static_cast<int32_t>(i % 10);
  const core::ConstTensorView lh(labels.data(), Shape{300}, Device::cpu(), core::DType::int32);
  Tensor ld(Shape{300}, core::DType::int32, gpu0);
  core::copy(lh, ld);
  Tensor probs(x.shape()), grad(x.shape()), pd(x.shape(), core::DType::float32, gpu0),
      gd(x.shape(), core::DType::float32, gpu0);
  const double loss = cpu.softmax_cross_entropy(x, lh, probs, grad, 8.0f);
  CHECK(be.softmax_cross_entropy(xd, ld, pd, gd, 8.0f) == Approx(loss).epsilon(1e-5));
  gpu_close_to_cpu(pd, probs, 1e-5f, "softmax");
  gpu_close_to_cpu(gd, grad, 1e-5f, "softmax gradient");
  CHECK(be.count_correct(xd, ld) == cpu.count_correct(x, lh));

  const Tensor z = random_tensor(Shape{300}, 3, -5.0f, 5.0f);
  Tensor yb(Shape{300});
  for (int64_t i = 0; i < 300; ++i)
    yb[i] = static_cast<float>(i % 3 == 0);
  Tensor gb(Shape{300}), gbd(Shape{300}, core::DType::float32, gpu0);
  const Tensor zd = z.to(gpu0), ybd = yb.to(gpu0);
  CHECK(be.sigmoid_cross_entropy(zd, ybd, gbd, 1.0f) ==
        Approx(cpu.sigmoid_cross_entropy(z, yb, gb, 1.0f)).epsilon(1e-5));
  gpu_close_to_cpu(gbd, gb, 1e-5f, "sigmoid cross-entropy gradient");
  std::vector<int64_t> pos(200), neg(200), pos_d(200), neg_d(200);
  CHECK(be.binary_metrics(zd, ybd, pos_d, neg_d) == cpu.binary_metrics(z, yb, pos, neg));
  CHECK(pos_d == pos);
  CHECK(neg_d == neg);

  for (const char* name : {"sgd", "momentum", "adagrad", "adam", "rmsprop", "ftrl"}) {
    INFO(name);
    auto opt = core::make_optimizer(name, 0.05f).value(),
         opt_d = core::make_optimizer(name, 0.05f).value();
    Tensor w = random_tensor(Shape{50, 17}, 5);
    Tensor wd = w.to(gpu0);
    auto s = opt->make_slots(w.shape()), sd = opt_d->make_slots(w.shape(), gpu0);
    for (int t = 0; t < 3; ++t) {
      const Tensor g = random_tensor(w.shape(), 10 + static_cast<uint64_t>(t));
      REQUIRE(opt->apply_dense(w, g, s).ok());
      REQUIRE(opt_d->apply_dense(wd, g.to(gpu0), sd).ok());
    }
    const std::vector<int64_t> rows{40, 3, 17};
    const Tensor g = random_tensor(Shape{3, 17}, 30);
    REQUIRE(opt->apply_sparse(w, rows, g, s).ok());
    REQUIRE(opt_d->apply_sparse(wd, rows, g.to(gpu0), sd).ok());
    gpu_close_to_cpu(wd, w, 1e-5f, name);
  }
}

TEST_CASE("CUDA CTR models compute as on the CPU", "[gpu]") {
  if (!have_gpu()) return;
  core::CtrModelConfig cfg;  // DeepFM: 26 fields, 13 dense, dim 16, 400-400-400
  const int64_t rows_total = cfg.fields * 50;
  // The model ctr_ps trains (its Keras form's graph), with the same values on both.
  core::keras::CtrGraph on_cpu(cfg, rows_total, false), on_gpu(cfg, rows_total, false);
  REQUIRE(on_gpu.to(gpu0, core::Precision::float32).ok());
  std::vector<Tensor> values;
  uint64_t seed = 20;
  for (const auto& [name, shape] : core::ctr_dense_variables(cfg))
    values.push_back(random_tensor(shape, ++seed, -0.05f, 0.05f));
  REQUIRE(on_cpu.assign(values).ok());
  for (auto& v : values)
    v = v.to(gpu0);
  REQUIRE(on_gpu.assign(values).ok());
  std::mt19937 rng(3);
  std::vector<core::Example> ex(256);
  for (auto& e : ex) {
    for (int f = 0; f < cfg.fields; ++f)
      e.ids.push_back(f * 50 + static_cast<int64_t>(rng() % 50));
    for (int j = 0; j < cfg.dense; ++j)
      e.features.push_back(static_cast<float>(rng() % 100) / 100.0f);
    e.label = static_cast<float>(rng() % 2);
  }
  const core::Batch b = core::collate(ex);
  REQUIRE((on_cpu.feed(b).ok() && on_gpu.feed(b).ok()));
  const Tensor rows = random_tensor(
      Shape{static_cast<int64_t>(on_cpu.ids().size()), cfg.row_width()}, 4, -0.05f, 0.05f);
  REQUIRE(on_cpu.give_rows(rows).ok());
  REQUIRE(on_gpu.give_rows(rows.to(gpu0)).ok());
  auto lc = on_cpu.forward(/*training=*/true);
  auto lg = on_gpu.forward(/*training=*/true);
  REQUIRE((lc.ok() && lg.ok()));
  gpu_close_to_cpu(Tensor::from_view(*lg), Tensor::from_view(*lc), 1e-4f, "logits");
  const Tensor g = random_tensor(Shape{256, 1}, 5);
  on_cpu.backward(g);
  on_gpu.backward(g.to(gpu0));
  // The gradients come to the host in the variables' layout, as a worker pushes them.
  troupe::test::close_to_cpu(Tensor::from_view(on_gpu.row_grads()),
                             Tensor::from_view(on_cpu.row_grads()), 1e-4f, "row gradients",
                             "on the GPU");
  const auto gc = on_cpu.dense_grads(), gg = on_gpu.dense_grads();
  REQUIRE(gc.size() == gg.size());
  for (size_t i = 0; i < gc.size(); ++i)
    troupe::test::close_to_cpu(Tensor::from_view(gg[i].second), Tensor::from_view(gc[i].second),
                               1e-4f, gc[i].first, "on the GPU");
}

TEST_CASE("training on the GPU follows the CPU, and steps take no new device memory", "[gpu]") {
  if (!have_gpu()) return;
  auto train = [](Device device, int steps, size_t* reserved_growth) {
    auto model = core::keras::make_classifier("mlp", 3).value();
    REQUIRE(model->to(device).ok());
    auto opt = core::make_optimizer("sgd", 0.1f).value();
    core::keras::ClassifierTrainer trainer(*model, *opt);
    const Tensor x = random_tensor(Shape{128, 784}, 9);
    std::vector<int32_t> y(128);
    for (size_t i = 0; i < y.size(); ++i)
      y[i] = static_cast<int32_t>(i % 10);
    cudaMemPool_t pool = nullptr;
    cudaDeviceGetDefaultMemPool(&pool, 0);
    uint64_t before = 0, after = 0;
    for (int s = 0; s < steps; ++s) {
      REQUIRE(trainer.train_step(x, y.data()).ok());
      if (s == 2) cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &before);
    }
    cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &after);
    if (reserved_growth != nullptr) *reserved_growth = after - before;
    std::vector<Tensor> w;
    for (auto& p : trainer.parameters())
      w.push_back(p.value->to(Device::cpu()));
    return w;
  };
  size_t growth = 1;
  const auto on_gpu = train(gpu0, 40, &growth);
  const auto on_cpu = train(Device::cpu(), 40, nullptr);
  CHECK(growth == 0);
  for (size_t i = 0; i < on_cpu.size(); ++i)
    CHECK(core::max_abs_diff(on_gpu[i], on_cpu[i]) < 1e-3f);
}
