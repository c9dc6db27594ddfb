#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "core/keras/keras_model.hpp"
#include "graph_check.hpp"

using namespace troupe::core;
using namespace troupe::core::graph;
using namespace troupe::core::keras;
using namespace troupe::core::layers;

using troupe::test::check_gradients;
using troupe::test::GraphCase;
using troupe::test::make;
using troupe::test::set_weight;

namespace {

Batch one_column(const std::string& name, Shape shape, std::vector<float> values) {
  Batch b;
  Column c;
  c.name = name;
  c.kind = ColumnKind::floats;
  c.shape = shape;
  c.floats = std::move(values);
  b.columns.push_back(std::move(c));
  return b;
}

}  // namespace

TEST_CASE("A graph of one Dense computes x w + b and its gradients", "[graph]") {
  Graph g;
  const int x = g.add_input("x", {ColumnKind::floats, {2}});
  auto y = g.call(make("Dense", R"({"name": "d", "units": 2})"), {x});
  REQUIRE(y.ok());
  REQUIRE(g.set_outputs(*y, {"d"}).ok());
  set_weight(g, "d/kernel", {1, 2, 3, 4});
  set_weight(g, "d/bias", {0.5f, -0.5f});
  REQUIRE(g.feed(one_column("x", Shape{2, 2}, {1, 0, 0, 1})).ok());
  REQUIRE(g.forward(false).ok());
  Tensor out = Tensor::from_view(g.output(0));
  CHECK(out.shape() == Shape{2, 2});
  CHECK(out[0] == 1.5f);  // [1, 0] w + b
  CHECK(out[1] == 1.5f);
  CHECK(out[2] == 3.5f);  // [0, 1] w + b
  CHECK(out[3] == 3.5f);
  Tensor dy(Shape{2, 2}, {1, 0, 0, 1});
  g.backward({dy});
  Tensor dw = g.gradient(0);
  CHECK(dw.shape() == Shape{2, 2});
  CHECK(dw[0] == 1.0f);  // x^T dy = identity
  CHECK(dw[1] == 0.0f);
  CHECK(dw[3] == 1.0f);
  CHECK(g.gradient(1)[0] == 1.0f);  // column sums of dy
}

TEST_CASE("A profiled step times each layer call and computes what an unprofiled one does",
          "[graph]") {
  Graph g;
  const int x = g.add_input("x", {ColumnKind::floats, {2}});
  auto h = g.call(make("Dense", R"({"name": "hidden", "units": 3, "activation": "relu"})"), {x});
  REQUIRE(h.ok());
  auto y = g.call(make("Dense", R"({"name": "out", "units": 1})"), *h);
  REQUIRE(y.ok());
  REQUIRE(g.set_outputs(*y, {"out"}).ok());
  const Batch b = one_column("x", Shape{2, 2}, {1, -2, 0.5f, 3});
  auto values = [](ConstTensorView t) { return std::vector<float>(t.data(), t.data() + t.size()); };
  auto step = [&] {
    REQUIRE(g.feed(b).ok());
    REQUIRE(g.forward(true).ok());
    auto out = values(g.output(0));
    const Tensor dy(Shape{2, 1}, {1, -1});
    g.backward({dy});
    return std::make_pair(out, values(g.gradient(0)));
  };
  const auto plain = step();
  g.set_profiling(true);
  for (int i = 0; i < 3; ++i) {
    const auto profiled = step();
    CHECK(profiled.first == plain.first);
    CHECK(profiled.second == plain.second);
  }
  const auto times = g.take_profile();
  REQUIRE(times.size() == 3);  // the two calls, then the tables' rows
  CHECK(times[0].layer == "hidden");
  CHECK(times[0].class_name == "Dense");
  CHECK(times[1].layer == "out");
  CHECK(times[2].layer == "(rows)");
  for (size_t i = 0; i < 2; ++i) {
    CHECK(times[i].forward_s > 0);
    CHECK(times[i].backward_s > 0);
  }
  CHECK(times[2].forward_s == 0);         // no tables: nothing copied
  for (const auto& t : g.take_profile())  // taken: the sums start again
    CHECK(t.forward_s + t.backward_s == 0);
  g.set_profiling(false);
  step();
  CHECK(g.take_profile().empty());
}

TEST_CASE("Graph inputs are checked against the batch by name, kind and shape", "[graph]") {
  Graph g;
  const int x = g.add_input("x", {ColumnKind::floats, {3}});
  auto y = g.call(make("Dense", R"({"name": "d", "units": 1})"), {x});
  REQUIRE(g.set_outputs(*y, {"d"}).ok());
  auto missing = g.feed(one_column("other", Shape{2, 3}, std::vector<float>(6)));
  REQUIRE_FALSE(missing.ok());
  CHECK_THAT(missing.error().message, Catch::Contains("'x'") && Catch::Contains("other"));
  auto shape = g.feed(one_column("x", Shape{2, 4}, std::vector<float>(8)));
  REQUIRE_FALSE(shape.ok());
  CHECK_THAT(shape.error().message, Catch::Contains("float32[3]"));
}

TEST_CASE("Dense gradients check numerically, linear and fused ReLU, on the CPU and a device",
          "[graph][gradcheck]") {
  for (const char* act : {"linear", "relu"}) {
    DYNAMIC_SECTION(act) {
      GraphCase c;
      const int x = c.graph.add_input("x", {ColumnKind::floats, {4}});
      const int h = troupe::test::with_dense_in_front(c, x, "front");
      auto y = c.graph.call(
          make("Dense", std::string(R"({"name": "d", "units": 3, "activation": ")") + act + "\"}"),
          {h});
      REQUIRE(y.ok());
      REQUIRE(c.graph.set_outputs(*y, {"d"}).ok());
      check_gradients(c);
    }
  }
}

TEST_CASE("A shared layer and a tensor used twice sum their gradients", "[graph][gradcheck]") {
  // y1 = D(a), y2 = D(b) with one Dense D; z = E(y1) and y1 also an output.
  GraphCase c;
  const int a = c.graph.add_input("a", {ColumnKind::floats, {3}});
  const int b = c.graph.add_input("b", {ColumnKind::floats, {3}});
  auto shared = make("Dense", R"({"name": "shared", "units": 2})");
  auto y1 = c.graph.call(shared, {a});
  auto y2 = c.graph.call(shared, {b});
  REQUIRE(y1.ok());
  REQUIRE(y2.ok());
  auto z = c.graph.call(make("Dense", R"({"name": "e", "units": 2})"), {(*y1)[0]});
  REQUIRE(z.ok());
  REQUIRE(c.graph.set_outputs({(*y1)[0], (*y2)[0], (*z)[0]}, {"y1", "y2", "z"}).ok());
  CHECK(c.graph.operations().size() == 2);
  CHECK(c.graph.weights().size() == 4);
  check_gradients(c);
}

TEST_CASE(
    "backward reports each trained weight's gradient as soon as it is final, once, in "
    "gradient_order()",
    "[graph]") {
  // y1 = S(a), y2 = S(b) with one Dense S (two calls), z = E(y1), f = F(b) with F frozen,
  // and BatchNormalization n = N(z): its moving statistics get no gradient.
  Graph g;
  const int a = g.add_input("a", {ColumnKind::floats, {3}});
  const int b = g.add_input("b", {ColumnKind::floats, {3}});
  auto shared = make("Dense", R"({"name": "s", "units": 2})");
  auto y1 = g.call(shared, {a});
  auto f = g.call(make("Dense", R"({"name": "f", "units": 2, "trainable": false})"), {b});
  auto y2 = g.call(shared, {b});
  REQUIRE((y1.ok() && f.ok() && y2.ok()));
  auto z = g.call(make("Dense", R"({"name": "e", "units": 2})"), {(*y1)[0]});
  REQUIRE(z.ok());
  auto n = g.call(make("BatchNormalization", R"({"name": "n"})"), {(*z)[0]});
  REQUIRE(n.ok());
  REQUIRE(g.set_outputs({(*n)[0], (*y2)[0], (*f)[0]}, {"n", "y2", "f"}).ok());
  Batch batch = one_column("a", Shape{4, 3}, {1, 2, 3, -1, 0, 2, 0.5f, 1, -2, 3, 1, 0});
  batch.columns.push_back(
      one_column("b", Shape{4, 3}, {2, 1, 0, 1, -1, 3, 0, 2, 1, -2, 1, 1}).columns[0]);
  REQUIRE(g.feed(batch).ok());
  REQUIRE(g.forward(/*training=*/true).ok());
  std::vector<Tensor> dys;
  for (size_t i = 0; i < g.outputs().size(); ++i) {
    Tensor dy(Shape{4, 2});
    for (int64_t j = 0; j < dy.size(); ++j)
      dy[j] = 0.25f * static_cast<float>(j % 5) - 0.4f + 0.1f * static_cast<float>(i);
    dys.push_back(dy);
  }
  std::vector<size_t> reported;
  std::vector<Tensor> at_report;
  g.backward({dys[0], dys[1], dys[2]}, [&](size_t w) {
    reported.push_back(w);
    at_report.push_back(Tensor::from_view(g.gradient(w)));  // what a bucket would send now
  });
  std::vector<std::string> paths;
  for (size_t w : reported)
    paths.push_back(g.weights()[w].path);
  // e's weights before s's: s's first call (on a) is the last the reverse pass reaches.
  CHECK(paths ==
        std::vector<std::string>{"n/gamma", "n/beta", "e/kernel", "e/bias", "s/kernel", "s/bias"});
  CHECK(reported == g.gradient_order());
  for (size_t i = 0; i < reported.size(); ++i) {
    INFO(paths[i]);
    const Tensor& final_grad = g.gradient(reported[i]);
    REQUIRE(final_grad.size() == at_report[i].size());
    for (int64_t j = 0; j < final_grad.size(); ++j)
      CHECK(at_report[i][j] == final_grad[j]);
  }
  // The same order in the next step, and a backward pass without the hook computes the
  // same gradients.
  std::vector<size_t> again;
  REQUIRE(g.forward(true).ok());
  g.backward({dys[0], dys[1], dys[2]}, [&](size_t w) { again.push_back(w); });
  CHECK(again == reported);
  REQUIRE(g.forward(true).ok());
  g.backward({dys[0], dys[1], dys[2]});
  for (size_t i = 0; i < reported.size(); ++i)
    for (int64_t j = 0; j < at_report[i].size(); ++j)
      CHECK(g.gradient(reported[i])[j] == at_report[i][j]);
}

TEST_CASE("A shared layer called on another width is an error naming it", "[graph]") {
  Graph g;
  const int a = g.add_input("a", {ColumnKind::floats, {3}});
  const int b = g.add_input("b", {ColumnKind::floats, {4}});
  auto shared = make("Dense", R"({"name": "shared", "units": 2})");
  REQUIRE(g.call(shared, {a}).ok());
  auto again = g.call(shared, {b});
  REQUIRE_FALSE(again.ok());
  CHECK_THAT(again.error().message, Catch::Contains("layer 'shared' (Dense)"));
}

TEST_CASE("Layer configs: unknown classes and unsupported arguments are named", "[graph]") {
  auto unknown = make_layer("Bidirectional", nlohmann::json::parse(R"({"name": "bi"})"));
  REQUIRE_FALSE(unknown.ok());
  CHECK_THAT(unknown.error().message,
             Catch::Contains("layer 'bi' (Bidirectional)") && Catch::Contains("Dense"));
  auto reg = make_layer(
      "Dense", nlohmann::json::parse(
                   R"({"name": "d", "units": 2, "kernel_regularizer": {"class_name": "L2"}})"));
  REQUIRE_FALSE(reg.ok());
  CHECK_THAT(reg.error().message,
             Catch::Contains("layer 'd' (Dense): argument 'kernel_regularizer'"));
  auto extra = make_layer("Dense", nlohmann::json::parse(R"({"name": "d", "units": 2, "foo": 1})"));
  REQUIRE_FALSE(extra.ok());
  CHECK_THAT(extra.error().message, Catch::Contains("argument 'foo' = 1: is not supported"));
  auto act = make_layer(
      "Dense", nlohmann::json::parse(R"({"name": "d", "units": 2, "activation": "mish"})"));
  REQUIRE_FALSE(act.ok());
  CHECK_THAT(act.error().message,
             Catch::Contains("argument 'activation'") && Catch::Contains("mish"));
  auto dtype = make_layer(
      "Dense", nlohmann::json::parse(R"({"name": "d", "units": 2, "dtype": "float64"})"));
  REQUIRE_FALSE(dtype.ok());
  CHECK_THAT(dtype.error().message, Catch::Contains("argument 'dtype'"));
}

TEST_CASE("Keras 3 Sequential and Functional configs become graphs", "[graph][keras]") {
  const auto seq = nlohmann::json::parse(R"({
    "module": "keras", "class_name": "Sequential",
    "config": {"name": "seq", "trainable": true, "layers": [
      {"module": "keras.layers", "class_name": "InputLayer",
       "config": {"batch_shape": [null, 4], "dtype": "float32", "sparse": false, "name": "x"}},
      {"module": "keras.layers", "class_name": "Dense",
       "config": {"name": "hidden", "trainable": true, "dtype": "float32", "units": 8,
                  "activation": "relu", "use_bias": true,
                  "kernel_initializer": {"module": "keras.initializers", "class_name": "GlorotUniform",
                                         "config": {"seed": null}},
                  "bias_initializer": {"module": "keras.initializers", "class_name": "Zeros", "config": {}},
                  "kernel_regularizer": null, "bias_regularizer": null, "kernel_constraint": null,
                  "bias_constraint": null}},
      {"module": "keras.layers", "class_name": "Dense",
       "config": {"name": "out", "units": 3, "activation": "linear"}}]}})");
  auto m = build_keras_model(seq);
  INFO((m ? std::string() : m.error().message));
  REQUIRE(m.ok());
  CHECK(m->graph->inputs().size() == 1);
  CHECK(m->graph->inputs()[0].name == "x");
  CHECK(m->graph->outputs()[0].name == "out");
  CHECK(m->graph->num_parameters() == 4 * 8 + 8 + 8 * 3 + 3);

  // Two inputs, a shared Dense, two outputs; in Keras 3's node form.
  const auto fn = nlohmann::json::parse(R"({
    "class_name": "Functional",
    "config": {"name": "two", "layers": [
      {"class_name": "InputLayer", "name": "a", "config": {"batch_shape": [null, 3], "dtype": "float32", "name": "a"}, "inbound_nodes": []},
      {"class_name": "InputLayer", "name": "b", "config": {"batch_shape": [null, 3], "dtype": "float32", "name": "b"}, "inbound_nodes": []},
      {"class_name": "Dense", "name": "shared", "config": {"name": "shared", "units": 2},
       "inbound_nodes": [
         {"args": [{"class_name": "__keras_tensor__", "config": {"shape": [null, 3], "dtype": "float32", "keras_history": ["a", 0, 0]}}], "kwargs": {}},
         {"args": [{"class_name": "__keras_tensor__", "config": {"shape": [null, 3], "dtype": "float32", "keras_history": ["b", 0, 0]}}], "kwargs": {}}]},
      {"class_name": "Dense", "name": "head", "config": {"name": "head", "units": 1, "activation": "sigmoid"},
       "inbound_nodes": [{"args": [{"class_name": "__keras_tensor__", "config": {"keras_history": ["shared", 1, 0]}}], "kwargs": {}}]}],
     "input_layers": [["a", 0, 0], ["b", 0, 0]],
     "output_layers": [["shared", 0, 0], ["head", 0, 0]]}})");
  auto f = build_keras_model(fn);
  INFO((f ? std::string() : f.error().message));
  REQUIRE(f.ok());
  CHECK(f->graph->inputs().size() == 2);
  CHECK(f->graph->outputs().size() == 2);
  CHECK(f->graph->outputs()[1].name == "head");
  CHECK(f->graph->operations().size() == 2);
  CHECK(f->graph->num_nodes() == 3);
  // Keras saves variables by class, not layer name: the first Dense is "dense".
  CHECK(f->weights_path.at("shared") == "layers/dense");
  CHECK(f->weights_path.at("head") == "layers/dense_1");

  // The same in tf_keras 2's form: nodes as lists of [layer, node, tensor, kwargs].
  auto tk = fn;
  auto& layers = tk["config"]["layers"];
  layers[2]["inbound_nodes"] = nlohmann::json::parse(R"([[["a", 0, 0, {}]], [["b", 0, 0, {}]]])");
  layers[3]["inbound_nodes"] = nlohmann::json::parse(R"([[["shared", 1, 0, {}]]])");
  layers[0]["config"].erase("batch_shape");
  layers[0]["config"]["batch_input_shape"] = {nullptr, 3};
  auto t = build_keras_model(tk);
  INFO((t ? std::string() : t.error().message));
  REQUIRE(t.ok());
  CHECK(t->graph->num_nodes() == 3);
}

TEST_CASE("Keras configs Troupe cannot train are errors naming the part", "[graph][keras]") {
  auto sub = build_keras_model(nlohmann::json::parse(R"({"class_name": "MyModel", "config": {}})"));
  REQUIRE_FALSE(sub.ok());
  CHECK_THAT(sub.error().message, Catch::Contains("MyModel"));
  auto var = build_keras_model(nlohmann::json::parse(R"({"class_name": "Sequential", "config": {
    "layers": [{"class_name": "InputLayer", "config": {"batch_shape": [null, null], "name": "seq"}},
               {"class_name": "Dense", "config": {"name": "d", "units": 1}}]}})"));
  REQUIRE_FALSE(var.ok());
  CHECK_THAT(var.error().message,
             Catch::Contains("input 'seq'") && Catch::Contains("fixed shapes"));
  auto dangling =
      build_keras_model(nlohmann::json::parse(R"({"class_name": "Functional", "config": {
    "layers": [{"class_name": "InputLayer", "name": "a", "config": {"batch_shape": [null, 2], "name": "a"}},
               {"class_name": "Dense", "name": "d", "config": {"name": "d", "units": 1},
                "inbound_nodes": [[["ghost", 0, 0, {}]]]}],
    "input_layers": [["a", 0, 0]], "output_layers": [["d", 0, 0]]}})"));
  REQUIRE_FALSE(dangling.ok());
  CHECK_THAT(dangling.error().message, Catch::Contains("layer 'd'"));
  // A custom class whose get_config leaves out its name is named by its node.
  auto unnamed = build_keras_model(nlohmann::json::parse(R"({"class_name": "Functional", "config": {
    "layers": [{"class_name": "InputLayer", "name": "a", "config": {"batch_shape": [null, 2], "name": "a"}},
               {"class_name": "VariableSelection", "name": "select", "config": {"units": 3},
                "inbound_nodes": [{"args": [{"class_name": "__keras_tensor__", "config": {"keras_history": ["a", 0, 0]}}], "kwargs": {}}]}],
    "input_layers": [["a", 0, 0]], "output_layers": [["select", 0, 0]]}})"));
  REQUIRE_FALSE(unnamed.ok());
  CHECK_THAT(unnamed.error().message, Catch::Contains("layer 'select' (VariableSelection)"));
  // A layer called with a constant (a keras.ops operation may take one) names the layer.
  auto constant =
      build_keras_model(nlohmann::json::parse(R"({"class_name": "Functional", "config": {
    "layers": [{"class_name": "InputLayer", "name": "a", "config": {"batch_shape": [null, 2], "name": "a"}},
               {"class_name": "Add", "module": "keras.layers", "name": "plus", "config": {"name": "plus"},
                "inbound_nodes": [{"args": [[{"class_name": "__keras_tensor__", "config": {"keras_history": ["a", 0, 0]}},
                                   {"class_name": "__tensor__", "config": {"value": [1, 2], "dtype": "float32"}}]], "kwargs": {}}]}],
    "input_layers": [["a", 0, 0]], "output_layers": [["plus", 0, 0]]}})"));
  REQUIRE_FALSE(constant.ok());
  CHECK_THAT(constant.error().message,
             Catch::Contains("layer 'plus' (Add)") && Catch::Contains("a constant"));
}

TEST_CASE("Initializers from Keras configs: TruncatedNormal stays within two deviations",
          "[graph]") {
  auto d = make("Dense", R"({"name": "d", "units": 64, "kernel_initializer":
      {"class_name": "TruncatedNormal", "config": {"mean": 0.0, "stddev": 0.1, "seed": 3}}})");
  Graph g;
  const int x = g.add_input("x", {ColumnKind::floats, {64}});
  REQUIRE(g.call(d, {x}).ok());
  const Tensor& k = d->weights()[0].value;
  double sum = 0, squares = 0;
  float widest = 0;
  for (int64_t i = 0; i < k.size(); ++i) {
    sum += k[i];
    squares += static_cast<double>(k[i]) * k[i];
    widest = std::max(widest, std::fabs(k[i]));
  }
  const double mean = sum / static_cast<double>(k.size());
  const double sd = std::sqrt(squares / static_cast<double>(k.size()) - mean * mean);
  CHECK(widest <= 0.2f);
  CHECK(std::fabs(mean) < 0.01);
  // A normal truncated at 2 deviations has a deviation of 0.88 of the normal's.
  CHECK(sd == Approx(0.088).epsilon(0.1));
  auto shifted = make_layer("Dense", nlohmann::json::parse(R"({"name": "e", "units": 2,
      "kernel_initializer": {"class_name": "TruncatedNormal", "config": {"mean": 1.0}}})"));
  REQUIRE_FALSE(shifted.ok());
  CHECK_THAT(shifted.error().message, Catch::Contains("kernel_initializer"));
}
