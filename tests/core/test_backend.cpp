// The backend interface: models, losses, metrics and optimizers run on the device their
// tensors live on (here the fake device of fake_device.hpp, whose kernels are the CPU's, so
// results must match the CPU's bit for bit), and the low-precision policies round the
// operands of every matrix product as their type holds them.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <random>

#include "core/backend.hpp"
#include "core/half.hpp"
#include "core/keras/classifier_graph.hpp"
#include "core/keras/classifier_trainer.hpp"
#include "core/keras/ctr_graph.hpp"
#include "core/nn/ctr_model.hpp"
#include "ctr_batch.hpp"
#include "fake_device.hpp"
#include "helpers.hpp"

using namespace troupe::core;
using troupe::test::FakeCuda;
using troupe::test::random_tensor;

namespace {

std::vector<int32_t> labels_of(int64_t n) {
  std::vector<int32_t> y(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    y[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7) % 10);
  return y;
}

// Trains `name` for `steps` steps on `device` and returns its weights on the host, the
// last loss and the evaluation's accuracy.
struct Trained {
  std::vector<Tensor> weights;
  float loss = 0.0f;
  double accuracy = 0.0;
};

Trained train(const std::string& name, const std::string& optimizer, Device device, int steps) {
  auto model = keras::make_classifier(name, 3).value();
  REQUIRE(model->to(device).ok());
  auto opt = make_optimizer(optimizer, 0.01f).value();
  keras::ClassifierTrainer trainer(*model, *opt);
  const Tensor x = random_tensor(Shape{16, 784}, 9);
  const auto y = labels_of(16);
  Trained t;
  for (int s = 0; s < steps; ++s)
    t.loss = trainer.train_step(x, y.data()).value();
  Accuracy acc;
  Mean loss;
  REQUIRE(trainer.evaluate_batch(x, y.data(), acc, loss).ok());
  t.accuracy = acc.result();
  for (auto& p : trainer.parameters()) {
    CHECK(p.value->device() == device);
    CHECK(p.grad->device() == device);
    t.weights.push_back(p.value->to(Device::cpu()));
  }
  for (auto& s : trainer.slots())
    for (auto& slot : s.slots)
      CHECK(slot.device() == device);
  return t;
}

}  // namespace

TEST_CASE("a model trained on a device ends where the same model trained on the CPU does",
          "[backend]") {
  FakeCuda fake(1);
  for (const auto& [name, opt] :
       std::vector<std::pair<std::string, std::string>>{{"mlp", "sgd"}, {"cnn", "rmsprop"}}) {
    INFO(name << " with " << opt);
    const auto transfers_before = fake.fake(0).transfers.load();
    const Trained cpu = train(name, opt, Device::cpu(), 3);
    const Trained dev = train(name, opt, Device::cuda(0), 3);
    CHECK(fake.fake(0).transfers > transfers_before + 3);  // batches and labels went over
    REQUIRE(cpu.weights.size() == dev.weights.size());
    for (size_t i = 0; i < cpu.weights.size(); ++i)
      CHECK(max_abs_diff(cpu.weights[i], dev.weights[i]) == 0.0f);
    CHECK(cpu.loss == dev.loss);
    CHECK(cpu.accuracy == dev.accuracy);
  }
}

TEST_CASE("a model cannot move to a device no backend serves, and stays where it was",
          "[backend]") {
  FakeCuda none(0);
  auto model = keras::make_classifier("mlp", 1).value();
  const Tensor before = *model->parameters()[0].value;
  auto st = model->to(Device::cuda(0));
  REQUIRE_FALSE(st.ok());
  CHECK_THAT(st.error().message, Catch::Contains("cuda:0"));
  CHECK(model->device().is_cpu());
  CHECK(model->parameters()[0].value->device().is_cpu());
  CHECK(max_abs_diff(before, *model->parameters()[0].value) == 0.0f);
}

TEST_CASE("CTR models compute on a device as on the CPU", "[backend]") {
  FakeCuda fake(1);
  for (CtrKind kind : {CtrKind::logistic, CtrKind::deepfm}) {
    INFO(ctr_kind_name(kind));
    CtrModelConfig cfg;
    cfg.kind = kind;
    cfg.fields = 4;
    cfg.dense = 2;
    cfg.dim = 3;
    cfg.hidden = {6, 5};
    // The model ctr_ps trains (its Keras form's graph), with the same values on both.
    keras::CtrGraph on_cpu(cfg, 12, /*keyed=*/false), on_dev(cfg, 12, /*keyed=*/false);
    REQUIRE(on_dev.to(Device::cuda(0), Precision::float32).ok());
    std::vector<Tensor> values;
    uint64_t seed = 10;
    for (const auto& [name, shape] : ctr_dense_variables(cfg))
      values.push_back(random_tensor(shape, ++seed));
    REQUIRE(on_cpu.assign(values).ok());
    for (auto& v : values)
      v = v.to(Device::cuda(0));
    REQUIRE(on_dev.assign(values).ok());
    // Two steps: rows given from the device, then (a smaller batch, the buffers reused)
    // from the host, as ctr_ps's workers give what the PS tasks sent.
    for (int step = 0; step < 2; ++step) {
      INFO("step " << step);
      const int n = 7 - 2 * step;
      const Batch b = troupe::test::make_ctr_batch(n, cfg.fields, cfg.dense, 5 + step);
      REQUIRE((on_cpu.feed(b).ok() && on_dev.feed(b).ok()));
      REQUIRE(on_cpu.ids() == on_dev.ids());
      const Tensor rows = random_tensor(
          Shape{static_cast<int64_t>(on_cpu.ids().size()), cfg.row_width()}, 2 + step);
      REQUIRE(on_cpu.give_rows(rows).ok());
      REQUIRE(on_dev.give_rows(step == 0 ? rows.to(Device::cuda(0)) : rows).ok());
      auto a = on_cpu.forward(/*training=*/true);
      auto d = on_dev.forward(/*training=*/true);
      REQUIRE((a.ok() && d.ok()));
      CHECK(d->device() == Device::cuda(0));
      CHECK(max_abs_diff(Tensor::from_view(*a), Tensor::from_view(*d).to(Device::cpu())) == 0.0f);
      const Tensor g = random_tensor(Shape{n, 1}, 4 + step);
      on_cpu.backward(g);
      on_dev.backward(g.to(Device::cuda(0)));
      const ConstTensorView rc = on_cpu.row_grads(), rd = on_dev.row_grads();
      CHECK(rd.device().is_cpu());
      CHECK(max_abs_diff(Tensor::from_view(rc), Tensor::from_view(rd)) == 0.0f);
      const auto gc = on_cpu.dense_grads(), gd = on_dev.dense_grads();
      REQUIRE(gc.size() == gd.size());
      for (size_t i = 0; i < gc.size(); ++i) {
        INFO(gc[i].first);
        CHECK(gd[i].second.device().is_cpu());
        CHECK(max_abs_diff(Tensor::from_view(gc[i].second), Tensor::from_view(gd[i].second)) ==
              0.0f);
      }
    }
  }
}

TEST_CASE("optimizers update variables on a device as on the CPU, whole and by rows", "[backend]") {
  FakeCuda fake(1);
  for (const char* name : {"sgd", "momentum", "nesterov", "adagrad", "adam", "rmsprop", "ftrl"}) {
    INFO(name);
    auto a = make_optimizer(name, 0.05f).value(), b = make_optimizer(name, 0.05f).value();
    Tensor w = random_tensor(Shape{6, 3}, 1);
    Tensor wd = w.to(Device::cuda(0));
    SlotSet sa = a->make_slots(w.shape()), sb = b->make_slots(w.shape(), Device::cuda(0));
    for (int step = 0; step < 3; ++step) {
      const Tensor g = random_tensor(w.shape(), 10 + static_cast<uint64_t>(step));
      REQUIRE(a->apply_dense(w, g, sa).ok());
      REQUIRE(b->apply_dense(wd, g.to(Device::cuda(0)), sb).ok());
    }
    CHECK(max_abs_diff(w, wd.to(Device::cpu())) == 0.0f);
    const std::vector<int64_t> rows{4, 0, 2};
    const Tensor g = random_tensor(Shape{3, 3}, 20);
    REQUIRE(a->apply_sparse(w, rows, g, sa).ok());
    REQUIRE(b->apply_sparse(wd, rows, g.to(Device::cuda(0)), sb).ok());
    CHECK(max_abs_diff(w, wd.to(Device::cpu())) == 0.0f);
    for (size_t s = 0; s < sa.slots.size(); ++s)
      CHECK(max_abs_diff(sa.slots[s], sb.slots[s].to(Device::cpu())) == 0.0f);
    // A device takes unique rows; a gradient on the host for a device variable is refused.
    auto repeated = b->apply_sparse(wd, {1, 1, 2}, g.to(Device::cuda(0)), sb);
    REQUIRE_FALSE(repeated.ok());
    CHECK_THAT(repeated.error().message, Catch::Contains("unique rows"));
    auto host_grad = b->apply_dense(wd, Tensor(w.shape()), sb);
    REQUIRE_FALSE(host_grad.ok());
    CHECK_THAT(host_grad.error().message, Catch::Contains("gradient on cpu"));
  }
}

TEST_CASE("add_into writes a + b in one pass on the CPU and as copy and add on a device",
          "[backend]") {
  FakeCuda fake(1);  // its backend keeps Backend's default add_into
  const Tensor a = random_tensor(Shape{33, 5}, 1), b = random_tensor(Shape{33, 5}, 2);
  Tensor want(a.shape());
  for (int64_t i = 0; i < a.size(); ++i)
    want.data()[i] = a.data()[i] + b.data()[i];
  Tensor y(a.shape());
  backend_for(Device::cpu()).value()->add_into(a, b, y);
  CHECK(max_abs_diff(y, want) == 0.0f);
  const Tensor ad = a.to(Device::cuda(0)), bd = b.to(Device::cuda(0));
  Tensor yd(a.shape(), DType::float32, Device::cuda(0));
  backend_for(Device::cuda(0)).value()->add_into(ad, bd, yd);
  CHECK(max_abs_diff(yd.to(Device::cpu()), want) == 0.0f);
  CHECK(max_abs_diff(ad.to(Device::cpu()), a) == 0.0f);  // the inputs are left as they were
}

TEST_CASE("low-precision policies round every matrix product's operands, float32 accumulates",
          "[backend]") {
  const Tensor x = random_tensor(Shape{5, 7}, 1), w = random_tensor(Shape{7, 4}, 2),
               b = random_tensor(Shape{4}, 3);
  auto reference = [&](Precision p) {
    // In double, from operands rounded as the policy's type holds them.
    Tensor y(Shape{5, 4});
    for (int64_t i = 0; i < 5; ++i)
      for (int64_t j = 0; j < 4; ++j) {
        double s = 0.0;
        for (int64_t k = 0; k < 7; ++k) {
          float xv = x[i * 7 + k], wv = w[k * 4 + j];
          if (p == Precision::tf32) {
            xv = round_tf32(xv);
            wv = round_tf32(wv);
          } else {
            xv = round_to(xv, compute_dtype(p));
            wv = round_to(wv, compute_dtype(p));
          }
          s += static_cast<double>(xv) * wv;
        }
        y[i * 4 + j] = static_cast<float>(s + b[j]);
      }
    return y;
  };
  Tensor y32(Shape{5, 4});
  cpu_backend().dense_forward(x, w, b, y32, Precision::float32);
  for (Precision p : {Precision::tf32, Precision::mixed_bfloat16, Precision::mixed_float16}) {
    INFO(precision_name(p));
    Tensor y(Shape{5, 4});
    cpu_backend().dense_forward(x, w, b, y, p);
    CHECK(max_abs_diff(y, reference(p)) < 1e-5f);  // float32 accumulation of 7 products
    CHECK(max_abs_diff(y, y32) > 1e-4f);           // the rounding made a difference
  }
  // float16's range: an operand past 65504 is infinite in a mixed_float16 product.
  Tensor big = x;
  big[0] = 70000.0f;
  Tensor y(Shape{5, 4});
  cpu_backend().dense_forward(big, w, b, y, Precision::mixed_float16);
  CHECK(std::isinf(y[0]));
  cpu_backend().dense_forward(big, w, b, y, Precision::mixed_bfloat16);
  CHECK(std::isfinite(y[0]));
}

TEST_CASE("a Dense backward in a low precision rounds dy and the operands", "[backend]") {
  const Tensor w = random_tensor(Shape{6, 3}, 4);
  const Tensor x = random_tensor(Shape{4, 6}, 5), dy = random_tensor(Shape{4, 3}, 6);
  Tensor dw(Shape{6, 3}), db(Shape{3}), dx(Shape{4, 6});
  cpu_backend().dense_backward(x, w, dy, dw, db, dx, Precision::mixed_bfloat16);
  // dW[k][j] = sum_i x[i][k] dy[i][j], from bf16-rounded values.
  for (int64_t k = 0; k < 6; ++k)
    for (int64_t j = 0; j < 3; ++j) {
      double s = 0.0;
      for (int64_t i = 0; i < 4; ++i)
        s += static_cast<double>(round_to(x[i * 6 + k], DType::bfloat16)) *
             round_to(dy[i * 3 + j], DType::bfloat16);
      CHECK(std::fabs(dw[k * 3 + j] - s) < 1e-5);
    }
  // The bias' gradient sums the float32 dy.
  for (int64_t j = 0; j < 3; ++j) {
    double s = 0.0;
    for (int64_t i = 0; i < 4; ++i)
      s += dy[i * 3 + j];
    CHECK(std::fabs(db[j] - s) < 1e-5);
  }
  CHECK(dx.shape() == x.shape());
}
