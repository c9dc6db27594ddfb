// The layer graph's image layers: Conv2D and the 2-D poolings. Hand-checked windows,
// gradients against central differences on the CPU and the fake device (graph_check.hpp),
// and the arguments Troupe refuses named.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "graph_check.hpp"
#include "sparse_layer_helpers.hpp"

using namespace troupe::core;
using namespace troupe::core::graph;
using namespace troupe::core::layers;
using namespace troupe::test::sparse;
using troupe::test::check_gradients;
using troupe::test::GraphCase;
using troupe::test::make;
using troupe::test::with_dense_in_front;

// ---- Conv2D -----------------------------------------------------------------------------

TEST_CASE("Conv2D computes valid, same-with-strides and dilated windows", "[sparse][conv]") {
  // x = 1..9 in a 3x3 image of one channel; a 2x2 kernel of ones and a bias of 0.5.
  const Column x = float_column("x", Shape{1, 3, 3, 1}, iota(9));
  const TensorSpec spec{ColumnKind::floats, {3, 3, 1}};
  const std::vector<std::pair<std::string, std::vector<float>>> w = {{"c/kernel", {1, 1, 1, 1}},
                                                                     {"c/bias", {0.5f}}};
  check_values(run_one("Conv2D", R"({"name": "c", "filters": 1, "kernel_size": 2})", spec, x, w),
               {12.5f, 16.5f, 24.5f, 28.5f});
  // "same", stride 2: one row and column of padding at the bottom and right.
  check_values(run_one("Conv2D",
                       R"({"name": "c", "filters": 1, "kernel_size": 2, "strides": 2,
                           "padding": "same"})",
                       spec, x, w),
               {12.5f, 9.5f, 15.5f, 9.5f});
  // Dilation 2: the four corners.
  check_values(run_one("Conv2D", R"({"name": "c", "filters": 1, "kernel_size": 2,
                                     "dilation_rate": 2, "activation": "relu"})",
                       spec, x, w),
               {20.5f});
  // "same", stride 1, 3x3: padding one on every side; the centre sees all nine.
  const auto same = run_one(
      "Conv2D",
      R"({"name": "c", "filters": 1, "kernel_size": 3, "padding": "same", "use_bias": false})",
      spec, x, {{"c/kernel", std::vector<float>(9, 1.0f)}});
  check_values(same, {12, 21, 16, 27, 45, 33, 24, 39, 28});
}

TEST_CASE("Conv2D gradients check numerically for each geometry", "[sparse][conv][gradcheck]") {
  const char* configs[] = {
      R"({"name": "c", "filters": 3, "kernel_size": [3, 2]})",
      R"({"name": "c", "filters": 2, "kernel_size": 3, "strides": 2, "padding": "same"})",
      R"({"name": "c", "filters": 2, "kernel_size": 2, "strides": [1, 2], "padding": "same",
          "use_bias": false, "activation": "tanh"})",
      R"({"name": "c", "filters": 2, "kernel_size": 2, "dilation_rate": 2, "activation": "relu"})",
  };
  for (const char* config : configs) {
    DYNAMIC_SECTION(config) {
      GraphCase c;
      const int x = c.graph.add_input("x", {ColumnKind::floats, {5, 6, 2}});
      const int h = with_dense_in_front(c, x, "front");
      auto y = c.graph.call(make("Conv2D", config), {h});
      REQUIRE(y.ok());
      REQUIRE(c.graph.set_outputs(*y, {"c"}).ok());
      check_gradients(c);
    }
  }
}

TEST_CASE("Conv2D refuses what Troupe does not implement, naming it", "[sparse][conv]") {
  CHECK_THAT(refusal("Conv2D", R"({"name": "c", "filters": 2, "kernel_size": 3, "groups": 2})"),
             Catch::Contains("argument 'groups'"));
  CHECK_THAT(refusal("Conv2D", R"({"name": "c", "filters": 2, "kernel_size": 3,
                                   "data_format": "channels_first"})"),
             Catch::Contains("argument 'data_format'"));
  CHECK_THAT(
      refusal("Conv2D", R"({"name": "c", "filters": 2, "kernel_size": 3, "padding": "causal"})"),
      Catch::Contains("argument 'padding'"));
  CHECK_THAT(refusal("Conv2D", R"({"name": "c", "filters": 2, "kernel_size": 3, "strides": 2,
                                   "dilation_rate": 2})"),
             Catch::Contains("argument 'dilation_rate'"));
  CHECK_THAT(refusal("Conv2D", R"({"name": "c", "filters": 2, "kernel_size": 3, "lora_rank": 4})"),
             Catch::Contains("argument 'lora_rank'"));
  Graph g;
  const int x = g.add_input("x", {ColumnKind::floats, {2, 2, 1}});
  auto y = g.call(make("Conv2D", R"({"name": "c", "filters": 1, "kernel_size": 3})"), {x});
  REQUIRE_FALSE(y.ok());
  CHECK_THAT(y.error().message, Catch::Contains("layer 'c' (Conv2D)"));
}

// ---- Pooling ----------------------------------------------------------------------------

TEST_CASE("Max and average pooling: windows clip at the edges, means exclude padding",
          "[sparse][pool]") {
  const Column x = float_column("x", Shape{1, 3, 3, 1}, iota(9));
  const TensorSpec spec{ColumnKind::floats, {3, 3, 1}};
  check_values(
      run_one("MaxPooling2D", R"({"name": "p", "pool_size": 2, "padding": "same"})", spec, x),
      {5, 6, 8, 9});
  check_values(run_one("AveragePooling2D",
                       R"({"name": "p", "pool_size": [2, 2], "padding": "same"})", spec, x),
               {3, 4.5f, 7.5f, 9});
  check_values(run_one("MaxPooling2D", R"({"name": "p", "pool_size": 2, "strides": 1})", spec, x),
               {5, 6, 8, 9});
  check_values(
      run_one("AveragePooling2D", R"({"name": "p", "pool_size": 2, "strides": [1, 1]})", spec, x),
      {3, 4, 6, 7});
  // Two channels pool separately.
  check_values(
      run_one("MaxPooling2D", R"({"name": "p", "pool_size": [1, 2]})",
              {ColumnKind::floats, {1, 2, 2}}, float_column("x", Shape{1, 1, 2, 2}, {1, 8, 5, 2})),
      {5, 8});
  check_values(
      run_one("GlobalAveragePooling2D", R"({"name": "g"})", {ColumnKind::floats, {2, 2, 2}},
              float_column("x", Shape{1, 2, 2, 2}, iota(8))),
      {4, 5});
}

TEST_CASE("Pooling gradients check numerically", "[sparse][pool][gradcheck]") {
  const std::pair<const char*, const char*> layers[] = {
      {"MaxPooling2D", R"({"name": "p", "pool_size": 2, "padding": "same"})"},
      {"MaxPooling2D", R"({"name": "p", "pool_size": 3, "strides": 1})"},
      {"AveragePooling2D", R"({"name": "p", "pool_size": 2, "strides": 1, "padding": "same"})"},
      {"AveragePooling2D", R"({"name": "p", "pool_size": [2, 3]})"},
      {"GlobalAveragePooling2D", R"({"name": "p", "keepdims": true})"},
  };
  for (const auto& [cls, config] : layers) {
    DYNAMIC_SECTION(cls << " " << config) {
      GraphCase c;
      const int x = c.graph.add_input("x", {ColumnKind::floats, {4, 5, 2}});
      const int h = with_dense_in_front(c, x, "front");
      auto y = c.graph.call(make(cls, config), {h});
      REQUIRE(y.ok());
      REQUIRE(c.graph.set_outputs(*y, {"p"}).ok());
      troupe::test::CheckOptions o;
      o.eps = 1e-3f;  // max pooling's choice must not flip within the step
      check_gradients(c, o);
    }
  }
}

TEST_CASE("Pooling refuses what Troupe does not implement, naming it", "[sparse][pool]") {
  CHECK_THAT(refusal("MaxPooling2D", R"({"name": "p", "pool_size": 2, "padding": "full"})"),
             Catch::Contains("argument 'padding'"));
  CHECK_THAT(refusal("AveragePooling2D", R"({"name": "p", "pool_size": 2,
                                             "data_format": "channels_first"})"),
             Catch::Contains("argument 'data_format'"));
  CHECK_THAT(refusal("GlobalAveragePooling2D", R"({"name": "p", "data_format": "channels_first"})"),
             Catch::Contains("argument 'data_format'"));
}
