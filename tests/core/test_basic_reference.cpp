// The layer group "basic" against Keras itself (fixtures of tests/keras/basic_fixtures.py):
// Troupe's graph of each small model, given the model's weights and inputs, must give
// Keras's predict() outputs within 1e-5 relative (float32), on the CPU and the fake device.
// BatchNormalization's training mode is checked against one Keras call with training=True:
// its outputs and the moving statistics it leaves.
#include <catch2/catch.hpp>

#include <cmath>
#include <fstream>
#include <string>

#include "keras_reference.hpp"

using namespace troupe::core;
using troupe::test::check_against_keras;
using troupe::test::column_from;

TEST_CASE("Keras reference: merges, Concatenate and Dot", "[keras][basic]") {
  check_against_keras("basic_merges");
}

TEST_CASE("Keras reference: Flatten, Reshape, Concatenate on middle axes, Identity, Rescaling",
          "[keras][basic]") {
  check_against_keras("basic_reshapes");
}

TEST_CASE("Keras reference: BatchNormalization in inference", "[keras][basic]") {
  check_against_keras("basic_batchnorm");
}

TEST_CASE("Keras reference: LayerNormalization", "[keras][basic]") {
  check_against_keras("basic_layernorm");
}

TEST_CASE("Keras reference: the global 1-D poolings", "[keras][basic]") {
  check_against_keras("basic_pooling");
}

TEST_CASE("Keras reference: Dense and Activation with every activation", "[keras][basic]") {
  check_against_keras("basic_activations");
}

TEST_CASE("Keras reference: Dropout in inference", "[keras][basic]") {
  check_against_keras("basic_dropout");
}

namespace {

void check_close(ConstTensorView got_view, const nlohmann::json& want, const std::string& what) {
  Tensor got = Tensor::from_view(got_view).to(Device::cpu());
  const auto values = want["values"].get<std::vector<double>>();
  REQUIRE(static_cast<int64_t>(values.size()) == got.size());
  for (int64_t k = 0; k < got.size(); ++k) {
    const double v = values[static_cast<size_t>(k)];
    INFO(what << "[" << k << "]: troupe " << got[k] << ", keras " << v);
    CHECK(std::fabs(got[k] - v) <= 1e-5 * (1.0 + std::fabs(v)));
  }
}

}  // namespace

TEST_CASE("Keras reference: BatchNormalization in training, and its moving statistics",
          "[keras][basic]") {
  const auto doc = troupe::test::reference_fixture("basic_batchnorm_training");
  auto run = [&](bool on_device) {
    auto model = troupe::test::reference_model(doc);
    auto& g = *model.graph;
    if (on_device) REQUIRE(g.to(Device::cuda(0)).ok());
    Batch batch;
    for (const auto& [k, v] : doc["inputs"].items())
      batch.columns.push_back(column_from(k, v));
    REQUIRE(g.feed(batch).ok());
    REQUIRE(g.forward(/*training=*/true, 1).ok());
    for (size_t i = 0; i < g.outputs().size(); ++i)
      check_close(g.output(i), doc["outputs"][g.outputs()[i].name], g.outputs()[i].name);
    for (const auto& [name, stats] : doc["moving"].items()) {
      auto* layer = g.operation(name);
      REQUIRE(layer != nullptr);
      for (const auto& w : layer->weights())
        if (stats.contains(w.name)) check_close(w.value, stats[w.name], name + "/" + w.name);
    }
  };
  SECTION("cpu") {
    run(false);
  }
  SECTION("fake device") {
    troupe::test::FakeCuda fake(1);
    run(true);
  }
}
