// The arithmetic behind compile(): Backend::loss against values worked out by hand, against
// Keras's own values and gradients, and numerically, on the CPU and the fake device; and the
// optimizers read from Keras's serialized configs against Keras's own update sequences, on
// the CPU, through a device's backend, and in the CUDA kernels' per-element body.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/backend.hpp"
#include "core/cpu/cpu_backend.hpp"
#include "core/graph/compile.hpp"
#include "core/keras/compile_config.hpp"
#include "core/optimizer.hpp"
#include "fake_device.hpp"
#include "gpu/kernels/optimizer_step.hpp"
#include "keras_optimizer_steps.hpp"

using namespace troupe::core;
using troupe::test::FakeCuda;

namespace {

struct LossRun {
  double value = 0.0;
  std::vector<float> grad;
};

// Backend::loss of `kind` on `device`: predictions of `shape`, labels (floats of the
// predictions' shape, or class indices for the sparse kinds).
LossRun run_loss(LossKind kind, const Shape& shape, const std::vector<float>& pred,
                 const std::vector<float>& labels, float scale = 1.0f,
                 Device device = Device::cpu()) {
  Tensor p(shape, pred);
  Tensor l;
  if (loss_takes_classes(kind)) {
    l = Tensor(Shape{static_cast<int64_t>(labels.size())}, DType::int32, Device::cpu());
    for (size_t i = 0; i < labels.size(); ++i)
      l.data_as<int32_t>()[i] = static_cast<int32_t>(labels[i]);
  } else {
    l = Tensor(shape, labels);
  }
  Tensor g(shape);
  Tensor dp = p.to(device), dl = l.to(device), dg = g.to(device);
  LossRun r;
  r.value = backend_for(device).value()->loss(kind, dp, dl, dg, scale);
  Tensor back = dg.to(Device::cpu());
  r.grad.assign(back.data(), back.data() + back.size());
  return r;
}

}  // namespace

TEST_CASE("Losses by hand: values and gradients of the mean over examples", "[compile][loss]") {
  // bce: (-ln 0.5 - ln 0.75) / 2; d/dp: -1/p / 2 and 1/(1-p) / 2.
  auto bce = run_loss(LossKind::binary_crossentropy, Shape{2, 1}, {0.5f, 0.25f}, {1, 0});
  CHECK(bce.value == Approx((std::log(2.0) - std::log(0.75)) / 2));
  CHECK(bce.grad[0] == Approx(-1.0));
  CHECK(bce.grad[1] == Approx(2.0 / 3.0));
  // bce from logits: softplus(0) - 0 = ln 2; sigmoid(0) - 1.
  auto bcel = run_loss(LossKind::binary_crossentropy_logits, Shape{1, 1}, {0.0f}, {1});
  CHECK(bcel.value == Approx(std::log(2.0)));
  CHECK(bcel.grad[0] == Approx(-0.5));
  // mse: ((1 - 0)^2 + (2 - 4)^2) / 2 over one row of two; 2 (p - t) / 2.
  auto mse = run_loss(LossKind::mean_squared_error, Shape{1, 2}, {1, 2}, {0, 4});
  CHECK(mse.value == Approx(2.5));
  CHECK(mse.grad[0] == Approx(1.0));
  CHECK(mse.grad[1] == Approx(-2.0));
  // Categorical, probabilities [0.25, 0.75] against class 1: -ln 0.75; the gradient through
  // the division by the row's sum: (dq - sum dq q) / s = (0 + 1, -4/3 + 1).
  for (auto kind :
       {LossKind::categorical_crossentropy, LossKind::sparse_categorical_crossentropy}) {
    const std::vector<float> labels = kind == LossKind::categorical_crossentropy
                                          ? std::vector<float>{0, 1}
                                          : std::vector<float>{1};
    auto cce = run_loss(kind, Shape{1, 2}, {0.25f, 0.75f}, labels);
    CHECK(cce.value == Approx(-std::log(0.75)));
    CHECK(cce.grad[0] == Approx(1.0));
    CHECK(cce.grad[1] == Approx(-1.0 / 3.0));
  }
  // From logits [0, 0] against class 0: ln 2; softmax - one_hot.
  for (auto kind : {LossKind::categorical_crossentropy_logits,
                    LossKind::sparse_categorical_crossentropy_logits}) {
    const std::vector<float> labels = kind == LossKind::categorical_crossentropy_logits
                                          ? std::vector<float>{1, 0}
                                          : std::vector<float>{0};
    auto r = run_loss(kind, Shape{1, 2}, {0, 0}, labels);
    CHECK(r.value == Approx(std::log(2.0)));
    CHECK(r.grad[0] == Approx(-0.5));
    CHECK(r.grad[1] == Approx(0.5));
  }
  // The gradient scale (loss weight times loss scale) multiplies the gradient only.
  auto scaled = run_loss(LossKind::mean_squared_error, Shape{1, 2}, {1, 2}, {0, 4}, 8.0f);
  CHECK(scaled.value == Approx(2.5));
  CHECK(scaled.grad[1] == Approx(-16.0));
}

TEST_CASE("Losses match Keras's values and gradients, clipping included",
          "[compile][loss][keras]") {
  // Keras's numbers: jax.value_and_grad(lambda p: loss(t, p))(p) with keras 3.15.1 (JAX):
  //   p_bin = [[0.3], [0.99999999], [0.6], [1e-3]]; t_bin = [[1], [1], [0], [0.25]]
  //   z_bin = [[0.3], [-4.0], [2.0], [0.0]]
  //   p_prob = [[0.2, 0.5, 0.3], [0.9, 1e-9, 0.1]]; p_unnorm = [[0.4, 1, 0.6], [1.8, 0, 0.2]]
  //   logits = [[1, -2, 0.5], [3, 0, -1]]; t_soft = [[0.1, 0.7, 0.2], [1, 0, 0]]; t_cls = [1, 0]
  //   BinaryCrossentropy()(t_bin, p_bin), BinaryCrossentropy(from_logits=True)(t_bin, z_bin),
  //   CategoricalCrossentropy()(t_soft, p_prob), (t_soft, p_unnorm),
  //   CategoricalCrossentropy(from_logits=True)(t_soft, logits),
  //   SparseCategoricalCrossentropy()(t_cls, p_unnorm), (from_logits=True)(t_cls, logits),
  //   MeanSquaredError()(t_soft, p_prob)
  // p_bin[1] rounds to 1.0 and is clipped: no gradient; p_prob's 1e-9 is clipped too.
  const std::vector<float> p_bin = {0.3f, 0.99999999f, 0.6f, 1e-3f}, t_bin = {1, 1, 0, 0.25f},
                           z_bin = {0.3f, -4.0f, 2.0f, 0.0f};
  const std::vector<float> p_prob = {0.2f, 0.5f, 0.3f, 0.9f, 1e-9f, 0.1f},
                           p_unnorm = {0.4f, 1.0f, 0.6f, 1.8f, 0.0f, 0.2f},
                           logits = {1, -2, 0.5f, 3, 0, -1}, t_soft = {0.1f, 0.7f, 0.2f, 1, 0, 0},
                           t_cls = {1, 0};
  struct Case {
    LossKind kind;
    Shape shape;
    std::vector<float> pred, labels;
    double value;
    std::vector<double> grad;
  };
  const std::vector<Case> cases = {
      {LossKind::binary_crossentropy,
       Shape{4, 1},
       p_bin,
       t_bin,
       0.961988211,
       {-0.833333313, -0.0, 0.62500006, -62.3123093}},
      {LossKind::binary_crossentropy_logits,
       Shape{4, 1},
       z_bin,
       t_bin,
       1.84814513,
       {-0.106389366, -0.24550347, 0.220199257, 0.0625}},
      {LossKind::categorical_crossentropy,
       Shape{2, 3},
       p_prob,
       t_soft,
       0.496151,
       {0.25, -0.199999988, 0.166666687, -0.055555582, 0.5, 0.5}},
      {LossKind::categorical_crossentropy,
       Shape{2, 3},
       p_unnorm,
       t_soft,
       0.496151,
       {0.125, -0.099999994, 0.0833333433, -0.027777791, 0.25, 0.25}},
      {LossKind::categorical_crossentropy_logits,
       Shape{2, 3},
       logits,
       t_soft,
       1.38524032,
       {0.251874447, -0.334970564, 0.0830961168, -0.0318802297, 0.0233063102, 0.00857391302}},
      {LossKind::sparse_categorical_crossentropy,
       Shape{2, 3},
       p_unnorm,
       t_cls,
       0.399253875,
       {0.25, -0.25, 0.25, -0.027777791, 0.25, 0.25}},
      {LossKind::sparse_categorical_crossentropy_logits,
       Shape{2, 3},
       logits,
       t_cls,
       1.78524041,
       {0.301874459, -0.48497057, 0.183096111, -0.0318802297, 0.0233063102, 0.00857391302}},
      {LossKind::mean_squared_error,
       Shape{2, 3},
       p_prob,
       t_soft,
       0.0133333337,
       {0.0333333351, -0.0666666627, 0.0333333388, -0.0333333425, 3.33333333e-10, 0.0333333351}},
  };
  FakeCuda fake(1);
  for (const auto& c : cases) {
    for (Device d : {Device::cpu(), Device::cuda(0)}) {
      INFO(loss_kind_name(c.kind) << " on " << d.to_string());
      auto r = run_loss(c.kind, c.shape, c.pred, c.labels, 1.0f, d);
      CHECK(r.value == Approx(c.value).epsilon(1e-6));
      for (size_t i = 0; i < c.grad.size(); ++i)
        CHECK(r.grad[i] == Approx(c.grad[i]).epsilon(1e-5).margin(1e-9));
    }
  }
}

TEST_CASE("Loss gradients check numerically", "[compile][loss][gradcheck]") {
  // Probabilities well inside the clip, logits of either sign, several rows of 4 classes.
  const std::vector<float> probs = {0.1f,  0.4f,  0.3f, 0.2f, 0.7f, 0.05f,
                                    0.15f, 0.35f, 0.3f, 0.3f, 0.6f, 0.8f};
  const std::vector<float> logits = {1.2f, -0.3f, 0.5f,  2.0f, -1.0f, 0.1f,
                                     0.0f, 0.7f,  -2.2f, 1.5f, 0.3f,  -0.6f};
  const std::vector<float> soft = {0.1f, 0.2f, 0.3f, 0.4f, 0, 0, 1, 0, 0.5f, 0.5f, 0, 0};
  const std::vector<float> bin = {1, 0, 0.3f, 1, 0, 1, 0.5f, 0, 1, 1, 0, 0.2f};
  const std::vector<float> classes = {3, 0, 1};
  struct Case {
    LossKind kind;
    const std::vector<float>* pred;
    const std::vector<float>* labels;
  };
  for (const Case& c :
       std::vector<Case>{{LossKind::binary_crossentropy, &probs, &bin},
                         {LossKind::binary_crossentropy_logits, &logits, &bin},
                         {LossKind::categorical_crossentropy, &probs, &soft},
                         {LossKind::categorical_crossentropy_logits, &logits, &soft},
                         {LossKind::sparse_categorical_crossentropy, &probs, &classes},
                         {LossKind::sparse_categorical_crossentropy_logits, &logits, &classes},
                         {LossKind::mean_squared_error, &logits, &soft}}) {
    INFO(loss_kind_name(c.kind));
    const Shape shape{3, 4};
    const auto analytic = run_loss(c.kind, shape, *c.pred, *c.labels);
    for (size_t i = 0; i < c.pred->size(); ++i) {
      const float h = 1e-3f;
      auto plus = *c.pred, minus = *c.pred;
      plus[i] += h;
      minus[i] -= h;
      const double numeric = (run_loss(c.kind, shape, plus, *c.labels).value -
                              run_loss(c.kind, shape, minus, *c.labels).value) /
                             (2.0 * static_cast<double>(h));
      CHECK(analytic.grad[i] == Approx(numeric).epsilon(1e-2).margin(2e-4));
    }
  }
}

TEST_CASE("Sparse losses average over every position of a sequence", "[compile][loss]") {
  // [2, 2, 3] predictions with [2, 2] class indices: Keras's per-position loss, then the mean
  // over all four positions: the same as [4, 3] against 4 labels.
  const std::vector<float> logits = {1, 0, -1, 0.5f, 0.5f, 2, -1, 3, 0, 0, 0, 0};
  const std::vector<float> classes = {0, 2, 1, 1};
  auto seq =
      run_loss(LossKind::sparse_categorical_crossentropy_logits, Shape{2, 2, 3}, logits, classes);
  auto flat =
      run_loss(LossKind::sparse_categorical_crossentropy_logits, Shape{4, 3}, logits, classes);
  CHECK(seq.value == Approx(flat.value));
  CHECK(seq.grad == flat.grad);
}

TEST_CASE("A large logit gap gives Keras's log-softmax loss, not a clamped one",
          "[compile][loss]") {
  // p of the label is e^-100: -log_softmax is 100; a clamp at 1e-30 would give 69.1.
  auto r = run_loss(LossKind::sparse_categorical_crossentropy_logits, Shape{1, 2}, {100, 0}, {1});
  CHECK(r.value == Approx(100.0));
}

TEST_CASE("Optimizers read from Keras configs step as Keras's own do",
          "[compile][optimizer][keras]") {
  namespace ko = troupe::test::keras_optimizers;
  FakeCuda fake(1);
  for (const auto& s : ko::steps()) {
    INFO(s.name);
    auto config = keras::parse_keras_optimizer(nlohmann::json::parse(s.optimizer));
    REQUIRE(config.ok());
    const Shape shape{static_cast<int64_t>(ko::w0.size())};
    auto check = [&](const float* w, size_t step, const char* where) {
      INFO(where << ", step " << step + 1);
      for (size_t i = 0; i < ko::w0.size(); ++i)
        CHECK(w[i] == Approx(s.w[step][i]).epsilon(2e-5).margin(2e-7));
    };
    // On the host.
    auto opt = make_optimizer(*config);
    Tensor w(shape, ko::w0);
    SlotSet slots = opt->make_slots(shape);
    for (size_t t = 0; t < ko::grads.size(); ++t) {
      REQUIRE(opt->apply_dense(w, Tensor(shape, ko::grads[t]), slots).ok());
      check(w.data(), t, "cpu");
    }
    // Through a device's backend: the config (weight decay, schedule) is what travels.
    auto dev_opt = make_optimizer(*config);
    Tensor dw = Tensor(shape, ko::w0).to(Device::cuda(0));
    SlotSet dslots = dev_opt->make_slots(shape, Device::cuda(0));
    for (size_t t = 0; t < ko::grads.size(); ++t) {
      REQUIRE(
          dev_opt->apply_dense(dw, Tensor(shape, ko::grads[t]).to(Device::cuda(0)), dslots).ok());
      check(dw.to(Device::cpu()).data(), t, "fake cuda");
    }
    // The CUDA kernels' per-element body, run here over every element.
    std::vector<float> bw = ko::w0, s0(ko::w0.size()), s1(ko::w0.size());
    const float init = config->kind == OptimizerConfig::Kind::adagrad ||
                               config->kind == OptimizerConfig::Kind::ftrl
                           ? config->initial_accumulator
                           : 0.0f;
    std::fill(s0.begin(), s0.end(), init);
    for (size_t t = 0; t < ko::grads.size(); ++t) {
      const auto step = troupe::gpu::kernels::optimizer_step(*config, static_cast<int64_t>(t) + 1);
      for (size_t i = 0; i < bw.size(); ++i)
        troupe::gpu::kernels::optimizer_update(step, static_cast<int64_t>(i),
                                               static_cast<int64_t>(i), bw.data(),
                                               ko::grads[t].data(), s0.data(), s1.data());
      check(bw.data(), t, "cuda body");
    }
  }
}

TEST_CASE("Weight decay of a sparse update touches only its rows", "[compile][optimizer]") {
  OptimizerConfig c;
  c.kind = OptimizerConfig::Kind::adam;
  c.learning_rate = 0.1f;
  c.weight_decay = 0.5f;
  auto opt = make_optimizer(c);
  CHECK(opt->config().weight_decay == 0.5f);
  Tensor w(Shape{3, 2}, {1, 1, 2, 2, 3, 3});
  SlotSet slots = opt->make_slots(w.shape());
  REQUIRE(opt->apply_sparse(w, {1}, Tensor(Shape{1, 2}, {0, 0}), slots).ok());
  // A zero gradient moves nothing through Adam: row 1 only decays, w (1 - 0.5 * 0.1).
  CHECK(w[2] == Approx(2 * 0.95));
  CHECK(w[3] == Approx(2 * 0.95));
  CHECK(w[0] == 1.0f);
  CHECK(w[4] == 3.0f);
}

TEST_CASE("ExponentialDecay sets each update's learning rate", "[compile][optimizer]") {
  OptimizerConfig c;
  c.learning_rate = 0.1f;
  c.decay_steps = 2;
  c.decay_rate = 0.5f;
  CHECK(c.learning_rate_at(1) == Approx(0.1));
  CHECK(c.learning_rate_at(2) == Approx(0.1 * std::sqrt(0.5)));
  CHECK(c.learning_rate_at(3) == Approx(0.05));
  c.staircase = true;
  CHECK(c.learning_rate_at(2) == Approx(0.1));
  CHECK(c.learning_rate_at(3) == Approx(0.05));
  CHECK(make_optimizer(c)->learning_rate_at(5) == Approx(0.025));
}
