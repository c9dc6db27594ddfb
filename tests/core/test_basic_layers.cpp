// The layer group "basic" (core/layers: Flatten, Reshape, Identity, Concatenate, the
// element-wise merges, Dot, Dropout, BatchNormalization, LayerNormalization, the global
// 1-D poolings, Rescaling, and the activation-fused Dense): forward values worked out by
// hand on small inputs, gradients checked numerically on the CPU and the fake device
// (graph_check.hpp), and the arguments Troupe does not implement refused by name.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "graph_check.hpp"

using namespace troupe::core;
using namespace troupe::core::graph;
using namespace troupe::core::layers;

using troupe::test::check_gradients;
using troupe::test::CheckOptions;
using troupe::test::GraphCase;
using troupe::test::make;
using troupe::test::with_dense_in_front;

namespace {

struct In {
  Shape shape;  // with the batch axis
  std::vector<float> values;
};

// One call of `layer` on the inputs, forward in the given mode: its output on the host.
Tensor forward_one(const std::shared_ptr<Operation>& layer, const std::vector<In>& ins,
                   bool training = false, uint64_t seed = 0) {
  Graph g;
  std::vector<int> ids;
  Batch batch;
  for (size_t i = 0; i < ins.size(); ++i) {
    auto dims = ins[i].shape.to_vector();
    const std::string name = "in" + std::to_string(i);
    ids.push_back(g.add_input(name, {ColumnKind::floats, {dims.begin() + 1, dims.end()}}));
    Column c;
    c.name = name;
    c.kind = ColumnKind::floats;
    c.shape = ins[i].shape;
    c.floats = ins[i].values;
    batch.columns.push_back(std::move(c));
  }
  auto out = g.call(layer, ids);
  INFO((out ? std::string() : out.error().message));
  REQUIRE(out.ok());
  REQUIRE(g.set_outputs(*out, {"out"}).ok());
  REQUIRE(g.feed(batch).ok());
  auto st = g.forward(training, seed);
  INFO((st ? std::string() : st.error().message));
  REQUIRE(st.ok());
  return Tensor::from_view(g.output(0));
}

void check_values(const Tensor& got, const Shape& shape, const std::vector<float>& want,
                  double eps = 1e-6) {
  REQUIRE(got.shape() == shape);
  for (size_t i = 0; i < want.size(); ++i) {
    INFO("element " << i);
    CHECK(got[static_cast<int64_t>(i)] == Approx(want[i]).epsilon(eps).margin(1e-7));
  }
}

// The error a graph call of `layer` on inputs of these per-example shapes gives.
std::string build_error(const std::shared_ptr<Operation>& layer,
                        const std::vector<std::vector<int64_t>>& shapes) {
  Graph g;
  std::vector<int> ids;
  for (size_t i = 0; i < shapes.size(); ++i)
    ids.push_back(g.add_input("in" + std::to_string(i), {ColumnKind::floats, shapes[i]}));
  auto out = g.call(layer, ids);
  REQUIRE_FALSE(out.ok());
  return out.error().message;
}

std::string config_error(const std::string& cls, const std::string& config) {
  auto l = make_layer(cls, nlohmann::json::parse(config));
  REQUIRE_FALSE(l.ok());
  return l.error().message;
}

}  // namespace

TEST_CASE("Flatten, Reshape and Identity are views with the shapes Keras gives", "[graph][basic]") {
  const In x{Shape{2, 2, 3}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}};
  std::vector<float> same(x.values);
  check_values(forward_one(make("Flatten", R"({"name": "f"})"), {x}), Shape{2, 6}, same);
  check_values(forward_one(make("Reshape", R"({"name": "r", "target_shape": [3, -1]})"), {x}),
               Shape{2, 3, 2}, same);
  check_values(forward_one(make("Identity", R"({"name": "i"})"), {x}), Shape{2, 2, 3}, same);
  // A rank-1 input flattens to [batch, 1].
  check_values(forward_one(make("Flatten", R"({"name": "f"})"), {{Shape{3}, {1, 2, 3}}}),
               Shape{3, 1}, {1, 2, 3});
}

TEST_CASE("Concatenate joins along the last and a middle axis", "[graph][basic]") {
  const In a{Shape{2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8}};
  const In b{Shape{2, 2, 1}, {10, 20, 30, 40}};
  check_values(forward_one(make("Concatenate", R"({"name": "c"})"), {a, b}), Shape{2, 2, 3},
               {1, 2, 10, 3, 4, 20, 5, 6, 30, 7, 8, 40});
  const In c{Shape{2, 1, 2}, {10, 20, 30, 40}};
  check_values(forward_one(make("Concatenate", R"({"name": "c", "axis": 1})"), {a, c}),
               Shape{2, 3, 2}, {1, 2, 3, 4, 10, 20, 5, 6, 7, 8, 30, 40});
}

TEST_CASE("The element-wise merges and Dot compute Keras's values", "[graph][basic]") {
  const In a{Shape{2, 2}, {1, -2, 3, 4}};
  const In b{Shape{2, 2}, {5, 6, -7, 8}};
  const In c{Shape{2, 2}, {2, 2, 2, -1}};
  check_values(forward_one(make("Add", R"({"name": "m"})"), {a, b, c}), Shape{2, 2},
               {8, 6, -2, 11});
  check_values(forward_one(make("Subtract", R"({"name": "m"})"), {a, b}), Shape{2, 2},
               {-4, -8, 10, -4});
  check_values(forward_one(make("Multiply", R"({"name": "m"})"), {a, b, c}), Shape{2, 2},
               {10, -24, -42, -32});
  check_values(forward_one(make("Average", R"({"name": "m"})"), {a, b, c}), Shape{2, 2},
               {8.0f / 3, 2, -2.0f / 3, 11.0f / 3});
  check_values(forward_one(make("Maximum", R"({"name": "m"})"), {a, b, c}), Shape{2, 2},
               {5, 6, 3, 8});
  check_values(forward_one(make("Minimum", R"({"name": "m"})"), {a, b, c}), Shape{2, 2},
               {1, -2, -7, -1});
  check_values(forward_one(make("Dot", R"({"name": "d", "axes": 1})"), {a, b}), Shape{2, 1},
               {5 - 12, -21 + 32});
}

TEST_CASE("Dropout drops and scales in training only, by its seed", "[graph][basic]") {
  std::vector<float> ones(4000, 1.0f);
  const In x{Shape{1000, 4}, ones};
  auto layer = make("Dropout", R"({"name": "d", "rate": 0.25})");
  Tensor train = forward_one(layer, {x}, /*training=*/true, 5);
  int64_t zeros = 0;
  for (int64_t i = 0; i < train.size(); ++i) {
    if (train[i] == 0.0f)
      ++zeros;
    else
      REQUIRE(train[i] == Approx(1.0f / 0.75f));
  }
  CHECK(zeros > 900);  // 1000 expected
  CHECK(zeros < 1100);
  check_values(forward_one(layer, {x}, /*training=*/false), Shape{1000, 4}, ones);
  // The same step seed with another layer seed drops other elements; the same one, the same.
  Tensor seeded =
      forward_one(make("Dropout", R"({"name": "d", "rate": 0.25, "seed": 3})"), {x}, true, 5);
  Tensor again =
      forward_one(make("Dropout", R"({"name": "d", "rate": 0.25, "seed": 3})"), {x}, true, 5);
  int64_t differ = 0;
  for (int64_t i = 0; i < seeded.size(); ++i) {
    differ += seeded[i] != train[i];
    REQUIRE(seeded[i] == again[i]);
  }
  CHECK(differ > 500);
  check_values(forward_one(make("Dropout", R"({"name": "d", "rate": 0.0})"), {x}, true, 5),
               Shape{1000, 4}, ones);
}

TEST_CASE(
    "BatchNormalization: batch statistics and Keras's moving update in training, the "
    "moving statistics in inference and when frozen",
    "[graph][basic]") {
  // Two channels over a batch of 4: channel 0 is [1, 2, 3, 6] (mean 3, biased var 3.5),
  // channel 1 is [0, 0, 4, 4] (mean 2, var 4).
  const In x{Shape{4, 2}, {1, 0, 2, 0, 3, 4, 6, 4}};
  auto layer = make("BatchNormalization", R"({"name": "bn", "momentum": 0.9, "epsilon": 0.5})");
  REQUIRE(layer->weights().empty());
  Tensor y = forward_one(layer, {x}, /*training=*/true);
  const float r0 = 1.0f / std::sqrt(3.5f + 0.5f), r1 = 1.0f / std::sqrt(4.0f + 0.5f);
  check_values(y, Shape{4, 2}, {-2 * r0, -2 * r1, -1 * r0, -2 * r1, 0, 2 * r1, 3 * r0, 2 * r1},
               1e-5);
  const auto& w = layer->weights();
  REQUIRE(w.size() == 4);
  CHECK(w[0].name == "gamma");
  CHECK(w[1].name == "beta");
  CHECK(w[2].name == "moving_mean");
  CHECK(w[3].name == "moving_variance");
  CHECK_FALSE(w[2].trainable);
  CHECK_FALSE(w[3].trainable);
  // moving = moving * 0.9 + batch * 0.1, from 0 and 1; the biased variance, as Keras 3.
  CHECK(w[2].value[0] == Approx(0.3f));
  CHECK(w[2].value[1] == Approx(0.2f));
  CHECK(w[3].value[0] == Approx(0.9f + 0.35f));
  CHECK(w[3].value[1] == Approx(0.9f + 0.4f));
  // Inference: (x - moving_mean) / sqrt(moving_var + eps) * gamma + beta.
  layer->weights()[0].value.set(Tensor(Shape{2}, {2.0f, 1.0f}));
  layer->weights()[1].value.set(Tensor(Shape{2}, {0.5f, -1.0f}));
  const In one{Shape{1, 2}, {1, 1}};
  Tensor inf = forward_one(layer, {one}, /*training=*/false);
  check_values(inf, Shape{1, 2},
               {2.0f * (1 - 0.3f) / std::sqrt(1.25f + 0.5f) + 0.5f,
                (1 - 0.2f) / std::sqrt(1.3f + 0.5f) - 1.0f},
               1e-5);
  // A frozen layer trains in inference mode and leaves its statistics alone (Keras's
  // `training and self.trainable`).
  layer->set_trainable(false);
  Tensor frozen = forward_one(layer, {one}, /*training=*/true);
  check_values(frozen, Shape{1, 2}, {inf[0], inf[1]});
  CHECK(layer->weights()[2].value[0] == Approx(0.3f));
}

TEST_CASE("LayerNormalization normalizes each row over its last axis", "[graph][basic]") {
  // Row [1, 2, 3, 6]: mean 3, biased var 3.5.
  auto layer = make("LayerNormalization", R"({"name": "ln", "epsilon": 0.5, "axis": [-1]})");
  Tensor y = forward_one(layer, {{Shape{2, 4}, {1, 2, 3, 6, 0, 0, 0, 0}}});
  const float r = 1.0f / std::sqrt(4.0f);
  check_values(y, Shape{2, 4}, {-2 * r, -1 * r, 0, 3 * r, 0, 0, 0, 0}, 1e-5);
  auto plain = make("LayerNormalization", R"({"name": "ln", "center": false, "scale": false})");
  forward_one(plain, {{Shape{1, 2}, {1, 2}}});
  CHECK(plain->weights().empty());
}

TEST_CASE("The global 1-D poolings reduce the steps, channels last or first, keepdims",
          "[graph][basic]") {
  // Two examples of 3 steps x 2 features.
  const In x{Shape{2, 3, 2}, {1, 5, 4, -1, 7, 2, 0, 0, -3, 9, 3, 3}};
  check_values(forward_one(make("GlobalAveragePooling1D", R"({"name": "p"})"), {x}), Shape{2, 2},
               {4, 2, 0, 4});
  check_values(forward_one(make("GlobalMaxPooling1D", R"({"name": "p", "keepdims": true})"), {x}),
               Shape{2, 1, 2}, {7, 5, 3, 9});
  // channels_first: [batch, features=3, steps=2].
  check_values(
      forward_one(make("GlobalMaxPooling1D", R"({"name": "p", "data_format": "channels_first"})"),
                  {x}),
      Shape{2, 3}, {5, 4, 7, 0, 9, 3});
  check_values(forward_one(make("GlobalAveragePooling1D",
                                R"({"name": "p", "data_format": "channels_first",
                                    "keepdims": true})"),
                           {x}),
               Shape{2, 3, 1}, {3, 1.5f, 4.5f, 0, 3, 3});
}

TEST_CASE("Rescaling multiplies and shifts", "[graph][basic]") {
  check_values(forward_one(make("Rescaling", R"({"name": "r", "scale": 0.5, "offset": -1})"),
                           {{Shape{1, 3}, {0, 2, 5}}}),
               Shape{1, 3}, {-1, 0, 1.5f});
}

TEST_CASE("Activations compute Keras's formulas", "[graph][basic]") {
  // Reference values in double precision from the definitions.
  struct Case {
    const char* name;
    float x;
    double y;
  };
  const double e = std::exp(1.0);
  const Case cases[] = {
      {"gelu", 1.0f, 0.5 * (1 + std::erf(1 / std::sqrt(2.0)))},
      {"gelu", -2.0f, -2.0 * 0.5 * (1 + std::erf(-2 / std::sqrt(2.0)))},
      {"gelu", -5.0f, -5.0 * 0.5 * std::erfc(5 / std::sqrt(2.0))},  // a tail: no cancellation
      {"selu", -1.0f, 1.0507009873554805 * 1.6732632423543772 * (1 / e - 1)},
      {"selu", 2.0f, 2 * 1.0507009873554805},
      {"elu", -1.0f, 1 / e - 1},
      {"leaky_relu", -1.0f, -0.2},
      {"softplus", 100.0f, 100.0},
      {"softplus", -100.0f, std::exp(-100.0)},
      {"softplus", 0.5f, std::log1p(std::exp(0.5))},
      {"silu", 1.0f, 1 / (1 + 1 / e)},
      {"swish", -1.0f, -1 / (1 + e)},
      {"sigmoid", -2.0f, 1 / (1 + e * e)},
      {"tanh", 0.5f, std::tanh(0.5)},
      {"exponential", 1.5f, std::exp(1.5)},
      {"relu", -3.0f, 0.0},
      {"linear", -3.0f, -3.0},
  };
  for (const auto& c : cases) {
    INFO(c.name << "(" << c.x << ")");
    Tensor y = forward_one(
        make("Activation", std::string(R"({"name": "a", "activation": ")") + c.name + "\"}"),
        {{Shape{1, 1}, {c.x}}});
    CHECK(y[0] == Approx(c.y).epsilon(2e-6).margin(1e-30));
  }
  Tensor s = forward_one(make("Activation", R"({"name": "a", "activation": "softmax"})"),
                         {{Shape{1, 3}, {1, 2, 3}}});
  const double z = e + e * e + e * e * e;
  check_values(s, Shape{1, 3},
               {static_cast<float>(e / z), static_cast<float>(e * e / z),
                static_cast<float>(e * e * e / z)});
}

TEST_CASE("A shared Multiply weights rows at one call and multiplies equal shapes at another",
          "[graph][basic]") {
  auto m = make("Multiply", R"({"name": "m"})");
  Graph g;
  const int x = g.add_input("x", {ColumnKind::floats, {2, 3}});
  const int w = g.add_input("w", {ColumnKind::floats, {2, 1}});
  const int a = g.add_input("a", {ColumnKind::floats, {2}});
  const int b = g.add_input("b", {ColumnKind::floats, {2}});
  auto rows = g.call(m, {w, x});  // the weights first: Keras broadcasts either way
  auto same = g.call(m, {a, b});
  REQUIRE(rows.ok());
  REQUIRE(same.ok());
  CHECK(g.spec((*rows)[0]).shape == std::vector<int64_t>{2, 3});
  REQUIRE(g.set_outputs({(*rows)[0], (*same)[0]}, {"rows", "same"}).ok());
  Batch batch;
  batch.columns = {{"x", ColumnKind::floats, Shape{1, 2, 3}, {1, 2, 3, 4, 5, 6}, {}, {}},
                   {"w", ColumnKind::floats, Shape{1, 2, 1}, {2, -1}, {}, {}},
                   {"a", ColumnKind::floats, Shape{1, 2}, {1, 2}, {}, {}},
                   {"b", ColumnKind::floats, Shape{1, 2}, {3, 4}, {}, {}}};
  REQUIRE(g.feed(batch).ok());
  REQUIRE(g.forward(false).ok());
  check_values(Tensor::from_view(g.output(0)), Shape{1, 2, 3}, {2, 4, 6, -4, -5, -6});
  check_values(Tensor::from_view(g.output(1)), Shape{1, 2}, {3, 8});
  // And both calls' gradients, the shared layer's modes kept apart.
  GraphCase c;
  c.batch = 3;
  std::vector<int> in;
  for (const auto& [name, shape] : {std::pair<const char*, std::vector<int64_t>>{"x", {2, 3}},
                                    {"w", {2, 1}},
                                    {"a", {2}},
                                    {"b", {2}}})
    in.push_back(with_dense_in_front(c, c.graph.add_input(name, {ColumnKind::floats, shape}),
                                     std::string("front_") + name));
  auto shared = make("Multiply", R"({"name": "shared"})");
  auto y1 = c.graph.call(shared, {in[0], in[1]});
  auto y2 = c.graph.call(shared, {in[2], in[3]});
  REQUIRE(y1.ok());
  REQUIRE(y2.ok());
  REQUIRE(c.graph.set_outputs({(*y1)[0], (*y2)[0]}, {"y1", "y2"}).ok());
  check_gradients(c);
}

TEST_CASE("Basic layers' gradients check numerically", "[graph][basic][gradcheck]") {
  struct Case {
    const char* cls;
    const char* config;
    std::vector<std::vector<int64_t>> inputs;
    bool training = true;
  };
  const std::vector<Case> cases = {
      {"Flatten", "{}", {{2, 3}}},
      {"Reshape", R"({"target_shape": [3, 2]})", {{2, 3}}},
      {"Identity", "{}", {{3}}},
      {"Concatenate", "{}", {{2, 3}, {2, 1}}},
      {"Concatenate", R"({"axis": 1})", {{2, 3}, {1, 3}, {2, 3}}},
      {"Add", "{}", {{3}, {3}, {3}}},
      {"Subtract", "{}", {{3}, {3}}},
      {"Multiply", "{}", {{3}, {3}, {3}}},
      {"Multiply", "{}", {{3, 4}, {3, 1}}},  // rows weighted: Keras's broadcast
      {"Multiply", "{}", {{1}, {5}}},
      {"Average", "{}", {{3}, {3}}},
      {"Maximum", "{}", {{4}, {4}}},
      {"Minimum", "{}", {{4}, {4}, {4}}},
      {"Dot", R"({"axes": -1})", {{4}, {4}}},
      {"Dropout", R"({"rate": 0.3, "seed": 1})", {{6}}},
      {"BatchNormalization", "{}", {{3}}},
      {"BatchNormalization", R"({"momentum": 0.5})", {{2, 3}}, false},
      {"BatchNormalization", R"({"center": false})", {{2, 3}}},
      {"BatchNormalization", R"({"scale": false})", {{3}}},
      {"LayerNormalization", R"({"epsilon": 0.01})", {{2, 4}}},
      {"LayerNormalization", R"({"scale": false})", {{3}}},
      {"LayerNormalization", R"({"center": false})", {{3}}},
      {"GlobalAveragePooling1D", "{}", {{3, 2}}},
      {"GlobalMaxPooling1D", R"({"keepdims": true})", {{3, 2}}},
      {"GlobalMaxPooling1D", R"({"data_format": "channels_first"})", {{3, 2}}},
      {"Rescaling", R"({"scale": 2.5, "offset": 0.5})", {{3}}},
      {"ReLU", "{}", {{2, 3}}},
      {"LeakyReLU", R"({"negative_slope": 0.3})", {{2, 3}}},
  };
  for (size_t k = 0; k < cases.size(); ++k) {
    const Case& t = cases[k];
    std::string shapes;  // a section's name must be unique: the same layer on other inputs
    for (const auto& in : t.inputs)
      shapes += " " + Shape(in).to_string();
    DYNAMIC_SECTION(t.cls << " " << t.config << shapes
                          << (t.training ? " training" : " inference")) {
      GraphCase c;
      c.batch = 4;
      c.training = t.training;
      std::vector<int> xs;
      for (size_t i = 0; i < t.inputs.size(); ++i) {
        const std::string n = "x" + std::to_string(i);
        const int x = c.graph.add_input(n, {ColumnKind::floats, t.inputs[i]});
        xs.push_back(with_dense_in_front(c, x, "front" + std::to_string(i)));
      }
      auto config = nlohmann::json::parse(t.config);
      config["name"] = "tested";
      auto y = c.graph.call(make(t.cls, config.dump()), xs);
      INFO((y ? std::string() : y.error().message));
      REQUIRE(y.ok());
      REQUIRE(c.graph.set_outputs(*y, {"y"}).ok());
      CheckOptions o;
      // The extrema switch inputs where two are closer than the step: a smaller one.
      if (std::string(t.cls) == "Maximum" || std::string(t.cls) == "Minimum" ||
          std::string(t.cls) == "GlobalMaxPooling1D")
        o.eps = 1e-3f, o.abs_tol = 5e-3;
      check_gradients(c, o);
    }
  }
}

TEST_CASE("Dense with every activation checks numerically", "[graph][basic][gradcheck]") {
  for (const char* act : {"sigmoid", "tanh", "softmax", "gelu", "silu", "softplus", "elu", "selu",
                          "leaky_relu", "exponential"}) {
    DYNAMIC_SECTION(act) {
      GraphCase c;
      const int x = c.graph.add_input("x", {ColumnKind::floats, {4}});
      const int h = with_dense_in_front(c, x, "front");
      auto y = c.graph.call(
          make("Dense", std::string(R"({"name": "d", "units": 3, "activation": ")") + act + "\"}"),
          {h});
      REQUIRE(y.ok());
      REQUIRE(c.graph.set_outputs(*y, {"d"}).ok());
      check_gradients(c);
    }
  }
}

TEST_CASE("Unsupported arguments and shapes of the basic layers are errors naming them",
          "[graph][basic]") {
  CHECK_THAT(config_error("BatchNormalization", R"({"name": "bn", "renorm": true})"),
             Catch::Contains("layer 'bn' (BatchNormalization): argument 'renorm'"));
  CHECK_THAT(config_error("BatchNormalization", R"({"name": "bn", "synchronized": true})"),
             Catch::Contains("argument 'synchronized'"));
  CHECK_THAT(config_error("BatchNormalization",
                          R"({"name": "bn", "gamma_regularizer": {"class_name": "L2"}})"),
             Catch::Contains("argument 'gamma_regularizer'"));
  CHECK_THAT(build_error(make("BatchNormalization", R"({"name": "bn", "axis": 1})"), {{3, 4}}),
             Catch::Contains("layer 'bn' (BatchNormalization): axis 1"));
  CHECK_THAT(config_error("LayerNormalization", R"({"name": "ln", "rms_scaling": true})"),
             Catch::Contains("layer 'ln' (LayerNormalization): argument 'rms_scaling'"));
  CHECK_THAT(config_error("LayerNormalization", R"({"name": "ln", "axis": [1, 2]})"),
             Catch::Contains("argument 'axis'"));
  CHECK_THAT(config_error("Dot", R"({"name": "dot", "axes": 0})"),
             Catch::Contains("layer 'dot' (Dot): argument 'axes'"));
  CHECK_THAT(config_error("Dot", R"({"name": "dot", "axes": 1, "normalize": true})"),
             Catch::Contains("argument 'normalize'"));
  CHECK_THAT(build_error(make("Dot", R"({"name": "dot", "axes": -1})"), {{2, 3}, {2, 3}}),
             Catch::Contains("layer 'dot' (Dot)") && Catch::Contains("2-D"));
  CHECK_THAT(config_error("Dropout", R"({"name": "dr", "rate": 0.5, "noise_shape": [1, 3]})"),
             Catch::Contains("layer 'dr' (Dropout): argument 'noise_shape'"));
  CHECK_THAT(config_error("Dropout", R"({"name": "dr"})"), Catch::Contains("argument 'rate'"));
  CHECK_THAT(config_error("ReLU", R"({"name": "r6", "max_value": 6.0})"),
             Catch::Contains("layer 'r6' (ReLU): argument 'max_value'"));
  CHECK_THAT(config_error("LeakyReLU", R"({"name": "lr", "negative_slope": 2.0})"),
             Catch::Contains("layer 'lr' (LeakyReLU): argument 'negative_slope'"));
  CHECK_THAT(config_error("Dropout", R"({"name": "dr", "rate": 1.5})"),
             Catch::Contains("argument 'rate'"));
  CHECK_THAT(build_error(make("Add", R"({"name": "add"})"), {{3}, {1}}),
             Catch::Contains("layer 'add' (Add)") && Catch::Contains("float32[3], float32[1]"));
  CHECK_THAT(build_error(make("Average", R"({"name": "avg"})"), {{3}, {2, 3}}),
             Catch::Contains("layer 'avg' (Average)"));
  CHECK_THAT(build_error(make("Maximum", R"({"name": "mx"})"), {{3}, {4}}),
             Catch::Contains("layer 'mx' (Maximum)"));
  CHECK_THAT(build_error(make("Subtract", R"({"name": "sub"})"), {{3}, {3}, {3}}),
             Catch::Contains("layer 'sub' (Subtract): takes exactly two inputs"));
  CHECK_THAT(build_error(make("Concatenate", R"({"name": "cat", "axis": 0})"), {{3}, {3}}),
             Catch::Contains("layer 'cat' (Concatenate): axis 0"));
  CHECK_THAT(build_error(make("Concatenate", R"({"name": "cat", "axis": 1})"), {{2, 3}, {2, 4}}),
             Catch::Contains("layer 'cat' (Concatenate)") && Catch::Contains("float32[2, 4]"));
  CHECK_THAT(config_error("Rescaling", R"({"name": "rs", "scale": [1, 2, 3]})"),
             Catch::Contains("layer 'rs' (Rescaling): argument 'scale'"));
  CHECK_THAT(
      build_error(make("Flatten", R"({"name": "fl", "data_format": "channels_first"})"), {{2, 3}}),
      Catch::Contains("layer 'fl' (Flatten): data_format='channels_first'"));
  CHECK_THAT(build_error(make("Reshape", R"({"name": "re", "target_shape": [4, -1]})"), {{2, 3}}),
             Catch::Contains("layer 're' (Reshape): cannot reshape float32[2, 3]"));
  CHECK_THAT(build_error(make("GlobalAveragePooling1D", R"({"name": "gap"})"), {{3}}),
             Catch::Contains("layer 'gap' (GlobalAveragePooling1D)"));
  CHECK_THAT(config_error("GlobalMaxPooling1D", R"({"name": "gmp", "data_format": "nwc"})"),
             Catch::Contains("argument 'data_format'"));
}
