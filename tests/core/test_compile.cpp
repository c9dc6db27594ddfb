// compile() for a layer graph: real Keras compile_configs read against graphs of the same
// outputs (History names as Keras's own fit gave them), what Troupe refuses and how it says
// so, the metrics' states (against Keras's AUC numbers; merging; msgpack), and the
// Objective's step: losses, the backward pass with loss weights and scale, metric values,
// labels by column, across workers and on the fake device.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include <msgpack.hpp>
#include <nlohmann/json.hpp>

#include "core/graph/compile.hpp"
#include "core/graph/metric_state.hpp"
#include "core/graph/objective.hpp"
#include "core/keras/compile_config.hpp"
#include "graph_check.hpp"
#include "keras_compile_configs.hpp"

using namespace troupe::core;
using namespace troupe::core::graph;
using namespace troupe::core::keras;
using namespace troupe::core::layers;
using nlohmann::json;
using troupe::test::FakeCuda;
using troupe::test::make;

namespace {

// x (4,) -> Dense(3) "hidden" -> Dense(1, sigmoid) "click" and Dense(3) "kind".
std::unique_ptr<Graph> two_outputs() {
  auto g = std::make_unique<Graph>();
  const int x = g->add_input("x", {ColumnKind::floats, {4}});
  auto h = g->call(make("Dense", R"({"name": "hidden", "units": 3})"), {x}).value();
  auto click =
      g->call(make("Dense", R"({"name": "click", "units": 1, "activation": "sigmoid"})"), h)
          .value();
  auto kind = g->call(make("Dense", R"({"name": "kind", "units": 3})"), h).value();
  REQUIRE(g->set_outputs({click[0], kind[0]}, {"click", "kind"}).ok());
  return g;
}

// x (4,) -> Dense(units, activation) `name`.
std::unique_ptr<Graph> one_output(const std::string& name, int units,
                                  const std::string& activation = "softmax") {
  auto g = std::make_unique<Graph>();
  const int x = g->add_input("x", {ColumnKind::floats, {4}});
  auto y =
      g->call(make("Dense", R"({"name": ")" + name + R"(", "units": )" + std::to_string(units) +
                                R"(, "activation": ")" + activation + R"("})"),
              {x})
          .value();
  REQUIRE(g->set_outputs(y, {name}).ok());
  return g;
}

std::unique_ptr<Graph> graph_for(const std::string& fixture) {
  if (fixture == "single") return one_output("score", 1, "sigmoid");
  if (fixture == "single_ce") return one_output("probs", 1, "sigmoid");
  if (fixture.rfind("single", 0) == 0 || fixture == "functions" || fixture == "loss_dict_single")
    return one_output("probs", 3);
  return two_outputs();
}

const troupe::test::keras_compile::Fixture& fixture(const std::string& name) {
  for (const auto& f : troupe::test::keras_compile::fixtures())
    if (f.name == name) return f;
  FAIL("no fixture " << name);
  throw;
}

CompileConfig parse(const std::string& name, const CompileOptions& o = {}) {
  auto g = graph_for(name);
  auto cc = parse_compile_config(json::parse(fixture(name).config), *g, o);
  INFO(name << ": " << (cc ? std::string() : cc.error().message));
  REQUIRE(cc.ok());
  return *cc;
}

// The error parse_compile_config gives for `config` (a fixture's, edited) on `g`.
std::string error_of(const json& config, const Graph& g) {
  auto cc = parse_compile_config(config, g);
  REQUIRE_FALSE(cc.ok());
  CHECK(cc.error().code == Errc::invalid_argument);
  return cc.error().message;
}

Column floats(const std::string& name, Shape shape, std::vector<float> v) {
  Column c;
  c.name = name;
  c.kind = ColumnKind::floats;
  c.shape = shape;
  c.floats = std::move(v);
  return c;
}

Column ints(const std::string& name, Shape shape, std::vector<int64_t> v) {
  Column c;
  c.name = name;
  c.kind = ColumnKind::ints;
  c.shape = shape;
  c.ints = std::move(v);
  return c;
}

// Rows [begin, end) of a batch of two-output data: x, click (floats [n, 1]), kind (ints).
Batch click_kind_batch(int64_t begin, int64_t end) {
  std::vector<float> x, click;
  std::vector<int64_t> kind;
  for (int64_t i = begin; i < end; ++i) {
    for (int j = 0; j < 4; ++j)
      x.push_back(std::sin(static_cast<float>(i * 4 + j)));
    click.push_back(i % 3 == 0 ? 1.0f : 0.0f);
    kind.push_back(i % 3);
  }
  const int64_t n = end - begin;
  Batch b;
  b.columns = {floats("x", Shape{n, 4}, x), floats("click", Shape{n, 1}, click),
               ints("kind", Shape{n}, kind)};
  return b;
}

constexpr const char* kClickKind = R"({
  "optimizer": "sgd",
  "loss": {"click": "binary_crossentropy",
           "kind": {"module": "keras.losses", "class_name": "SparseCategoricalCrossentropy",
                    "config": {"name": "scce", "reduction": "sum_over_batch_size",
                               "from_logits": true, "ignore_class": null}}},
  "loss_weights": {"click": 1.0, "kind": 0.5},
  "metrics": {"click": ["accuracy"], "kind": ["acc"]},
  "steps_per_execution": 1})";

double value_of(const Objective& o, const std::string& name) {
  for (const auto& [n, v] : o.results())
    if (n == name) return v;
  FAIL("no History value " << name);
  return 0.0;
}

}  // namespace

TEST_CASE("Real Keras compile_configs give the History names of Keras's own fit",
          "[compile][keras]") {
  for (const auto& f : troupe::test::keras_compile::fixtures()) {
    const std::string name = f.name;
    if (name == "one_loss_two_outputs" || name == "single_ce") continue;  // refused: below
    INFO(name);
    auto names = parse(name).history_names();
    std::sort(names.begin(), names.end());  // History lists them sorted
    CHECK(names == f.history);
  }
  // Keras's "mae" and a clipnorm are refused, naming them; without them the names match.
  auto g = two_outputs();
  CHECK_THAT(error_of(json::parse(fixture("one_loss_two_outputs").config), *g),
             Catch::Contains("'mae'") && Catch::Contains("'kind'"));
  json ce = json::parse(fixture("single_ce").config);
  auto probs = one_output("probs", 1, "sigmoid");
  CHECK_THAT(error_of(ce, *probs), Catch::Contains("'clipnorm'") && Catch::Contains("SGD"));
  ce["optimizer"]["config"]["clipnorm"] = nullptr;
  auto cc = parse_compile_config(ce, *probs);
  REQUIRE(cc.ok());
  auto names = cc->history_names();
  std::sort(names.begin(), names.end());
  CHECK(names == fixture("single_ce").history);
}

TEST_CASE("compile_config: losses, weights, metrics and optimizers as Keras resolves them",
          "[compile][keras]") {
  SECTION("dict by output name, SGD with Nesterov momentum") {
    const auto cc = parse("multi_dict");
    CHECK(cc.optimizer.kind == OptimizerConfig::Kind::momentum);
    CHECK(cc.optimizer.nesterov);
    CHECK(cc.optimizer.learning_rate == 0.1f);
    REQUIRE(cc.outputs.size() == 2);
    CHECK(cc.outputs[0].loss->kind == LossKind::binary_crossentropy);
    CHECK(cc.outputs[0].loss_weight == 1.0f);
    CHECK(cc.outputs[0].loss_name == "click_loss");
    CHECK(cc.outputs[1].loss->kind == LossKind::sparse_categorical_crossentropy_logits);
    CHECK(cc.outputs[1].loss_weight == 0.5f);
    REQUIRE(cc.metrics.size() == 3);
    CHECK(cc.metrics[0].kind == MetricKind::binary_accuracy);  // a [1] output: binary
    CHECK(cc.metrics[1].kind == MetricKind::auc);
    CHECK(cc.metrics[1].num_thresholds == 100);
    CHECK(cc.metrics[1].name == "click_auc");
    CHECK(cc.metrics[2].kind == MetricKind::sparse_categorical_accuracy);  // sparse labels
    CHECK(cc.metrics[2].name == "kind_acc");
    CHECK(cc.metrics[2].output == 1);
  }
  SECTION("serialized objects on one output; Keras's model.metrics order") {
    const auto cc = parse("single_objects");
    CHECK(cc.optimizer.kind == OptimizerConfig::Kind::rmsprop);
    CHECK(cc.optimizer.momentum == 0.5f);
    CHECK(cc.outputs[0].loss->kind == LossKind::categorical_crossentropy);
    CHECK(cc.outputs[0].loss_weight == 0.5f);
    CHECK(cc.outputs[0].loss_name.empty());
    CHECK(cc.history_names() == std::vector<std::string>{"loss", "categorical_accuracy", "acc",
                                                         "my_auc", "mse", "MeanSquaredError",
                                                         "mean_squared_error", "weighted_acc"});
    CHECK(cc.metrics[1].kind == MetricKind::categorical_accuracy);  // one-hot labels
    CHECK(cc.metrics[6].weighted);
  }
  SECTION("crossentropy and accuracy resolved from a [1] output; Adam with ExponentialDecay") {
    json ce = json::parse(fixture("single_ce").config);
    ce["optimizer"]["config"]["clipnorm"] = nullptr;
    auto g = one_output("probs", 1, "sigmoid");
    const auto cc = parse_compile_config(ce, *g).value();
    CHECK(cc.outputs[0].loss->kind == LossKind::binary_crossentropy);
    CHECK(cc.optimizer.weight_decay == 0.01f);
    CHECK(cc.metrics[0].kind == MetricKind::binary_accuracy);
    CHECK(cc.metrics[1].threshold == 0.3f);
    CHECK(cc.metrics[2].name == "binary_accuracy_1");
    CHECK(cc.metrics[3].from_logits);
    CHECK(cc.metrics[3].num_thresholds == 50);
    const auto sparse = parse("single_sparse");
    CHECK(sparse.optimizer.kind == OptimizerConfig::Kind::adam);
    CHECK(sparse.optimizer.learning_rate == Approx(0.1));
    CHECK(sparse.optimizer.decay_steps == 10);
    CHECK(sparse.optimizer.decay_rate == 0.5f);
    CHECK(sparse.metrics[0].kind == MetricKind::sparse_categorical_accuracy);
  }
  SECTION("functions, AdamW, a loss for one output only") {
    const auto fn = parse("functions");
    CHECK(fn.optimizer.kind == OptimizerConfig::Kind::adam);
    CHECK(fn.optimizer.weight_decay == 0.004f);
    CHECK(fn.outputs[0].loss->kind == LossKind::categorical_crossentropy);
    CHECK(fn.metrics[0].kind == MetricKind::categorical_accuracy);
    const auto one = parse("loss_only_one_output");
    CHECK(one.optimizer.kind == OptimizerConfig::Kind::adagrad);
    CHECK_FALSE(one.outputs[1].loss.has_value());
    CHECK(one.outputs[0].loss_name.empty());  // one loss: no "<output>_loss"
  }
  SECTION("the labels' shape decides accuracy as in Keras") {
    // Class indices of shape [1] against 3 classes: sparse.
    CompileOptions o;
    o.label_shapes["probs"] = {1};
    CHECK(parse("loss_dict_single", o).metrics[0].kind == MetricKind::sparse_categorical_accuracy);
    // Multi-label binary cross-entropy on [5]: Keras picks categorical accuracy.
    auto g = one_output("tags", 5, "sigmoid");
    const json c = {{"optimizer", "adam"},
                    {"loss", "binary_crossentropy"},
                    {"metrics", json::array({"accuracy"})}};
    CHECK(parse_compile_config(c, *g).value().metrics[0].kind == MetricKind::categorical_accuracy);
  }
  SECTION("a LossScaleOptimizer gives its inner optimizer and its scale") {
    auto g = one_output("probs", 3);
    const json c = json::parse(R"({"optimizer": {"module": "keras.optimizers",
        "class_name": "LossScaleOptimizer", "config": {"name": "loss_scale_optimizer",
        "inner_optimizer": {"module": "keras.optimizers", "class_name": "SGD",
        "config": {"name": "sgd", "learning_rate": 0.5, "momentum": 0.0}},
        "initial_scale": 1024.0, "dynamic_growth_steps": 100}},
        "loss": "categorical_crossentropy"})");
    const auto cc = parse_compile_config(c, *g).value();
    CHECK(cc.optimizer.kind == OptimizerConfig::Kind::sgd);
    CHECK(cc.optimizer.learning_rate == 0.5f);
    REQUIRE(cc.loss_scale.has_value());
    CHECK(cc.loss_scale->initial == 1024.0f);
    CHECK(cc.loss_scale->growth_interval == 100);
  }
}

TEST_CASE("compile_config: what Troupe does not implement is an error naming it",
          "[compile][keras]") {
  auto g = two_outputs();
  const json base = json::parse(kClickKind);
  auto with = [&](const std::string& pointer, const json& value) {
    json c = base;
    c[json::json_pointer(pointer)] = value;
    return error_of(c, *g);
  };
  const json bce = {{"class_name", "BinaryCrossentropy"}, {"config", {{"from_logits", false}}}};
  auto loss_arg = [&](const char* key, const json& v) {
    json l = bce;
    l["config"][key] = v;
    return with("/loss/click", l);
  };
  CHECK_THAT(loss_arg("label_smoothing", 0.1), Catch::Contains("'label_smoothing'"));
  CHECK_THAT(loss_arg("axis", 1), Catch::Contains("'axis'"));
  CHECK_THAT(loss_arg("reduction", "sum"), Catch::Contains("'reduction'"));
  CHECK_THAT(loss_arg("gamma", 2.0), Catch::Contains("'gamma'"));
  CHECK_THAT(with("/loss/kind/config/ignore_class", -1), Catch::Contains("'ignore_class'"));
  CHECK_THAT(with("/loss/click", "hinge"),
             Catch::Contains("'hinge'") && Catch::Contains("'click'"));
  CHECK_THAT(with("/loss/click", json{{"class_name", "Huber"}, {"config", json::object()}}),
             Catch::Contains("'Huber'"));
  CHECK_THAT(with("/loss/nope", "mse"), Catch::Contains("'nope'"));
  CHECK_THAT(with("/loss", json::array({"mse"})), Catch::Contains("1 entries for 2 outputs"));
  CHECK_THAT(with("/loss", nullptr), Catch::Contains("'loss'"));
  CHECK_THAT(with("/loss_weights", json::array({1.0})), Catch::Contains("'loss_weights'"));
  CHECK_THAT(with("/metrics", json::array({"mse"})),
             Catch::Contains("'metrics'") && Catch::Contains("2 outputs"));
  CHECK_THAT(with("/metrics/click", json::array({"Precision"})), Catch::Contains("'Precision'"));
  CHECK_THAT(with("/metrics/click",
                  json::array({json{{"class_name", "AUC"}, {"config", {{"curve", "PR"}}}}})),
             Catch::Contains("'curve'"));
  CHECK_THAT(with("/metrics/click",
                  json::array({json{{"class_name", "AUC"}, {"config", {{"multi_label", true}}}}})),
             Catch::Contains("'multi_label'"));
  CHECK_THAT(with("/metrics/click", json::array({nullptr})), Catch::Contains("null"));
  CHECK_THAT(with("/sample_weight_mode", "temporal"), Catch::Contains("'sample_weight_mode'"));
  auto optimizer = [&](const char* cls, const char* key, const json& v) {
    return with("/optimizer", json{{"class_name", cls}, {"config", {{key, v}}}});
  };
  CHECK_THAT(optimizer("SGD", "clipnorm", 1.0), Catch::Contains("'clipnorm'"));
  CHECK_THAT(optimizer("SGD", "clipvalue", 1.0), Catch::Contains("'clipvalue'"));
  CHECK_THAT(optimizer("SGD", "global_clipnorm", 1.0), Catch::Contains("'global_clipnorm'"));
  CHECK_THAT(optimizer("Adam", "use_ema", true), Catch::Contains("'use_ema'"));
  CHECK_THAT(optimizer("Adam", "amsgrad", true), Catch::Contains("'amsgrad'"));
  CHECK_THAT(optimizer("RMSprop", "centered", true), Catch::Contains("'centered'"));
  CHECK_THAT(optimizer("Adam", "loss_scale_factor", 128.0), Catch::Contains("'loss_scale_factor'"));
  CHECK_THAT(optimizer("Adam", "gradient_accumulation_steps", 4),
             Catch::Contains("'gradient_accumulation_steps'"));
  CHECK_THAT(optimizer("Adam", "learning_rate",
                       json{{"class_name", "PiecewiseConstantDecay"}, {"config", json::object()}}),
             Catch::Contains("'learning_rate'"));
  CHECK_THAT(with("/optimizer", json{{"class_name", "Nadam"}, {"config", json::object()}}),
             Catch::Contains("'Nadam'"));
  CHECK_THAT(with("/optimizer", "lion"), Catch::Contains("'lion'"));
}

TEST_CASE("Metric states: Keras's definitions, its AUC buckets, merging and msgpack",
          "[compile][metrics]") {
  MetricSpec m;
  MetricState s;
  SECTION("binary accuracy compares the label with (p > threshold) exactly") {
    const std::vector<float> p = {0.2f, 0.6f, 0.4f, 0.9f}, y = {0, 1, 1, 0.7f};
    update_metric(m, p.data(), 4, 1, y.data(), 4, s);
    CHECK(s.result() == 0.5);
    m.threshold = 0.3f;
    MetricState t;
    update_metric(m, p.data(), 4, 1, y.data(), 4, t);
    CHECK(t.result() == 0.75);
  }
  SECTION("categorical and sparse accuracy take the first of equal maxima") {
    const std::vector<float> p = {0.5f, 0.5f, 0.0f, 0.1f, 0.2f, 0.7f};
    const std::vector<float> onehot = {0, 1, 0, 0, 0, 1}, classes = {0, 2};
    m.kind = MetricKind::categorical_accuracy;
    update_metric(m, p.data(), 2, 3, onehot.data(), 6, s);
    CHECK(s.result() == 0.5);
    m.kind = MetricKind::sparse_categorical_accuracy;
    MetricState t;
    update_metric(m, p.data(), 2, 3, classes.data(), 2, t);
    CHECK(t.result() == 1.0);
  }
  SECTION("mean squared error: the mean over the last axis, then over rows") {
    const std::vector<float> p = {1, 2, 0, 0}, y = {0, 0, 0, 3};
    m.kind = MetricKind::mean_squared_error;
    update_metric(m, p.data(), 2, 2, y.data(), 4, s);
    CHECK(s.result() == Approx((2.5 + 4.5) / 2));
  }
  SECTION("AUC matches keras.metrics.AUC") {
    // Keras: m = AUC(num_thresholds=T); m.update_state(y, p); m.result(), keras 3.15.1:
    // T = 200: 0.62499994, T = 5: 0.708333313, T = 3: 0.666666687; from_logits=True on z
    // (T = 200): 0.597222209.
    const std::vector<float> p = {0.1f, 0.4f, 0.35f, 0.8f, 0.05f, 0.6f,
                                  0.5f, 0.5f, 0.95f, 0.2f, 0.0f,  1.0f};
    const std::vector<float> y = {0, 0, 1, 1, 0, 1, 0, 1, 1, 0, 1, 0};
    const std::vector<float> z = {-2.0f, 0.5f, 0.1f, 3.0f,  -1.0f, 0.2f,
                                  0.0f,  0.0f, 2.0f, -0.7f, -5.0f, 4.0f};
    m.kind = MetricKind::auc;
    for (auto [t, expected] : std::vector<std::pair<int64_t, double>>{
             {200, 0.62499994}, {5, 0.708333313}, {3, 0.666666687}}) {
      m.num_thresholds = t;
      MetricState a;
      update_metric(m, p.data(), 12, 1, y.data(), 12, a);
      CHECK(a.result() == Approx(expected).epsilon(1e-6));
    }
    m.num_thresholds = 200;
    m.from_logits = true;
    update_metric(m, z.data(), 12, 1, y.data(), 12, s);
    CHECK(s.result() == Approx(0.597222209).epsilon(1e-6));
    // Two halves merged are the whole, and survive msgpack.
    MetricState first, second;
    update_metric(m, z.data(), 6, 1, y.data(), 6, first);
    update_metric(m, z.data() + 6, 6, 1, y.data() + 6, 6, second);
    MetricStates a, b;
    a.values = {first};
    b.values = {second};
    msgpack::sbuffer buf;
    msgpack::pack(buf, b);
    MetricStates back = msgpack::unpack(buf.data(), buf.size()).get().as<MetricStates>();
    REQUIRE(a.merge(back).ok());
    CHECK(a.values[0].positives == s.positives);
    CHECK(a.values[0].negatives == s.negatives);
    CHECK(a.values[0].result() == s.result());
  }
  SECTION("Keras's buckets: p in ((b-1)/(T-1), b/(T-1)] goes to b - 1") {
    CHECK(auc_bucket(0.0f, 5) == 0);
    CHECK(auc_bucket(0.25f, 5) == 0);
    CHECK(auc_bucket(0.26f, 5) == 1);
    CHECK(auc_bucket(1.0f, 5) == 3);
    CHECK(auc_bucket(std::nanf(""), 5) == 0);
  }
}

TEST_CASE("The objective's step: weighted losses, their gradients, metrics by column",
          "[compile][objective]") {
  auto g = two_outputs();
  const auto cc = parse_compile_config(json::parse(kClickKind), *g).value();
  Objective objective(cc, *g);
  CHECK(objective.names() ==
        std::vector<std::string>{"loss", "click_accuracy", "kind_acc", "click_loss", "kind_loss"});
  CHECK(objective.label_column(0) == "click");
  const Batch batch = click_kind_batch(0, 6);
  REQUIRE(g->feed(batch).ok());
  REQUIRE(g->forward(true).ok());

  // The losses, computed apart from the objective.
  Backend& be = cpu_backend();
  Tensor click_labels(Shape{6, 1}, batch.columns[1].floats), grad(Shape{6, 3});
  const double l_click =
      be.loss(LossKind::binary_crossentropy, g->output(0), click_labels, grad, 1.0f);
  Tensor classes(Shape{6}, DType::int32, Device::cpu());
  for (int i = 0; i < 6; ++i)
    classes.data_as<int32_t>()[i] = i % 3;
  const double l_kind =
      be.loss(LossKind::sparse_categorical_crossentropy_logits, g->output(1), classes, grad, 1.0f);
  // The click accuracy, from the predictions.
  Tensor out = Tensor::from_view(g->output(0));
  int correct = 0;
  for (int i = 0; i < 6; ++i)
    correct += (out[i] > 0.5f ? 1.0f : 0.0f) == batch.columns[1].floats[static_cast<size_t>(i)];

  auto loss = objective.train_step(*g, batch);
  REQUIRE(loss.ok());
  CHECK(*loss == Approx(l_click + 0.5 * l_kind));
  CHECK(value_of(objective, "loss") == Approx(*loss));
  CHECK(value_of(objective, "click_loss") == Approx(l_click));
  CHECK(value_of(objective, "kind_loss") == Approx(l_kind));
  CHECK(value_of(objective, "click_accuracy") == Approx(correct / 6.0));

  // d(loss)/d(a weight) against central differences of the objective's own loss.
  const Tensor dw = Tensor::from_view(g->gradient(0));  // hidden/kernel
  Tensor& w = g->weights()[0].weight().value;
  for (int64_t k : {0, 5, 11}) {
    const float keep = w[k], h = 1e-3f;
    auto loss_at = [&](float v) {
      w[k] = v;
      REQUIRE(g->forward(true).ok());
      Objective probe(cc, *g);
      return probe.test_step(*g, batch).value();
    };
    const double numeric = (loss_at(keep + h) - loss_at(keep - h)) / (2.0 * h);
    w[k] = keep;
    CHECK(dw[k] == Approx(numeric).epsilon(1e-2).margin(1e-4));
  }
  // The loss scale multiplies the gradients, not the loss.
  REQUIRE(g->forward(true).ok());
  auto scaled = objective.train_step(*g, batch, 8.0f);
  CHECK(*scaled == Approx(*loss));
  for (int64_t k = 0; k < dw.size(); ++k)
    CHECK(g->gradient(0).data()[k] == Approx(8.0 * dw[k]).margin(1e-6));
}

TEST_CASE("Objective labels: defaults, overrides, and errors that change nothing",
          "[compile][objective]") {
  auto g = two_outputs();
  Objective objective(parse_compile_config(json::parse(kClickKind), *g).value(), *g);
  Batch batch = click_kind_batch(0, 4);
  REQUIRE(g->feed(batch).ok());
  REQUIRE(g->forward(true).ok());
  batch.columns[2].ints[1] = 3;  // a class index outside [0, 3)
  auto bad = objective.train_step(*g, batch);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().code == Errc::out_of_range);
  CHECK_THAT(bad.error().message, Catch::Contains("'kind'") && Catch::Contains("below 3"));
  CHECK(objective.states().values[0].count == 0);
  batch.columns[2].name = "category";
  auto missing = objective.train_step(*g, batch);
  REQUIRE_FALSE(missing.ok());
  CHECK_THAT(missing.error().message, Catch::Contains("'kind'") && Catch::Contains("category"));
  batch.columns[2].ints[1] = 2;
  REQUIRE(objective.set_label_column("kind", "category").ok());
  CHECK(objective.train_step(*g, batch).ok());
  CHECK_FALSE(objective.set_label_column("other", "x").ok());
  batch.columns[1] = floats("click", Shape{4, 2}, std::vector<float>(8));
  auto shape = objective.train_step(*g, batch);
  REQUIRE_FALSE(shape.ok());
  CHECK_THAT(shape.error().message, Catch::Contains("[4, 2]"));

  // One output: its labels are "label".
  auto single = one_output("probs", 3);
  Objective one(parse_compile_config(json::parse(fixture("single_sparse").config), *single).value(),
                *single);
  CHECK(one.label_column(0) == "label");
  Batch b;
  b.columns = {click_kind_batch(0, 4).columns[0], ints("label", Shape{4, 1}, {0, 1, 2, 1})};
  REQUIRE(single->feed(b).ok());
  REQUIRE(single->forward(true).ok());
  REQUIRE(one.train_step(*single, b).ok());
  CHECK(one.names() == std::vector<std::string>{"loss", "accuracy", "sparse_categorical_accuracy"});
  CHECK(value_of(one, "accuracy") == value_of(one, "sparse_categorical_accuracy"));
}

TEST_CASE("Objective states of two workers merge into one process's, on a device too",
          "[compile][objective]") {
  auto run = [](Device device, const std::vector<std::pair<int64_t, int64_t>>& parts) {
    auto g = two_outputs();
    REQUIRE(g->to(device).ok());
    const auto cc = parse_compile_config(json::parse(kClickKind), *g).value();
    MetricStates total;
    for (auto [begin, end] : parts) {
      Objective worker(cc, *g);
      const Batch b = click_kind_batch(begin, end);
      REQUIRE(g->feed(b).ok());
      REQUIRE(g->forward(false).ok());
      REQUIRE(worker.test_step(*g, b).ok());
      msgpack::sbuffer buf;  // as a step returns it to the chief
      msgpack::pack(buf, worker.states());
      REQUIRE(total.merge(msgpack::unpack(buf.data(), buf.size()).get().as<MetricStates>()).ok());
    }
    std::vector<double> results;
    for (const auto& v : total.values)
      results.push_back(v.result());
    return results;
  };
  const auto whole = run(Device::cpu(), {{0, 12}});
  const auto split = run(Device::cpu(), {{0, 5}, {5, 12}});
  REQUIRE(whole.size() == split.size());
  for (size_t i = 0; i < whole.size(); ++i)
    CHECK(split[i] == Approx(whole[i]).epsilon(1e-6));
  FakeCuda fake(1);
  const auto device = run(Device::cuda(0), {{0, 12}});
  for (size_t i = 0; i < whole.size(); ++i)
    CHECK(device[i] == Approx(whole[i]).epsilon(1e-6));
}
