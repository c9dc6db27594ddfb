#pragma once

// Keras itself as the reference for a layer's forward pass: a fixture written by
// tests/keras/layer_reference.py (a model's architecture, its weights, inputs, and Keras's
// predict() outputs) is built here as a Troupe graph with the same weights, fed the same
// inputs, and its outputs compared with Keras's.
//
//   check_against_keras("conv2d_same_stride2");   // <fixture dir>/layers/conv2d_same_stride2.json

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "core/keras/keras_model.hpp"
#include "device_pass.hpp"

#ifndef TROUPE_KERAS_FIXTURES
#define TROUPE_KERAS_FIXTURES ""
#endif

namespace troupe::test {

inline core::Column column_from(const std::string& name, const nlohmann::json& a) {
  core::Column c;
  c.name = name;
  std::vector<int64_t> dims = a["shape"].get<std::vector<int64_t>>();
  c.shape = core::Shape(dims);
  const std::string dtype = a["dtype"];
  if (dtype == "string") {
    c.kind = core::ColumnKind::strings;
    c.strings = a["values"].get<std::vector<std::string>>();
  } else if (dtype == "int64") {
    c.kind = core::ColumnKind::ints;
    c.ints = a["values"].get<std::vector<int64_t>>();
  } else {
    c.kind = core::ColumnKind::floats;
    c.floats = a["values"].get<std::vector<float>>();
  }
  return c;
}

struct ReferenceOptions {
  double abs_tol = 1e-5, rel_tol = 1e-5;
  /// Also run on a CUDA device: the fake one (its kernels are the CPU's: results must
  /// agree), or in gpu_layer_tests the GPU (device_pass.hpp).
  bool fake_device = true;
};

/// The fixture directory: $TROUPE_KERAS_FIXTURES where set (a copy of the build's, on a
/// machine the tests were carried to), else the build's.
inline std::string fixtures_dir() {
  const char* env = std::getenv("TROUPE_KERAS_FIXTURES");
  return env != nullptr && *env != '\0' ? env : TROUPE_KERAS_FIXTURES;
}

/// Reference fixture `name`'s document (layers/<name>.json under the fixture directory).
inline nlohmann::json reference_fixture(const std::string& name) {
  const std::string path = fixtures_dir() + "/layers/" + name + ".json";
  std::ifstream in(path);
  INFO("fixture " << path);
  REQUIRE(in.good());
  return nlohmann::json::parse(in);
}

/// The fixture's model built as a graph, its layers holding the fixture's weights.
inline core::keras::KerasModel reference_model(const nlohmann::json& doc) {
  auto model = core::keras::build_keras_model(doc["model"]);
  INFO((model ? std::string() : model.error().message));
  REQUIRE(model.ok());
  for (const auto& layer : model->graph->operations()) {
    if (!doc["weights"].contains(layer->name())) continue;
    const auto& ws = doc["weights"][layer->name()];
    REQUIRE(ws.size() == layer->weights().size());
    for (size_t i = 0; i < ws.size(); ++i) {
      auto c = column_from("w", ws[i]);
      auto& w = layer->weights()[i];
      INFO(layer->name() << "/" << w.name << " " << c.shape.to_string() << " vs "
                         << w.shape.to_string());
      REQUIRE(c.shape.num_elements() == w.shape.num_elements());
      std::vector<float> values = c.floats;
      if (c.kind == core::ColumnKind::ints) values.assign(c.ints.begin(), c.ints.end());
      w.value = core::Tensor(w.shape, values);
    }
  }
  return std::move(*model);
}

/// Builds fixture `name` and compares Troupe's outputs with Keras's.
inline void check_against_keras(const std::string& name, const ReferenceOptions& o = {}) {
  const auto doc = reference_fixture(name);
  auto run = [&](bool on_device) {
    auto model = reference_model(doc);
    auto& g = *model.graph;
    if (on_device) REQUIRE(g.to(core::Device::cuda(0)).ok());
    core::Batch batch;
    for (const auto& [k, v] : doc["inputs"].items())
      batch.columns.push_back(column_from(k, v));
    auto st = g.feed(batch);
    INFO((st ? std::string() : st.error().message));
    REQUIRE(st.ok());
    for (auto& t : g.tables()) {  // the rows of each table's ids from its held value
      const auto& w = g.weights()[t.weight].weight();
      const int64_t width = w.shape[w.shape.rank() - 1];
      core::Tensor rows(core::Shape{static_cast<int64_t>(t.ids.size()), width});
      for (size_t r = 0; r < t.ids.size(); ++r)
        for (int64_t j = 0; j < width; ++j)
          rows[static_cast<int64_t>(r) * width + j] = w.value[t.ids[r] * width + j];
      t.rows = std::move(rows);
    }
    auto fw = g.forward(/*training=*/false);
    INFO((fw ? std::string() : fw.error().message));
    REQUIRE(fw.ok());
    for (size_t i = 0; i < g.outputs().size(); ++i) {
      const auto& want = doc["outputs"][g.outputs()[i].name];
      core::Tensor got = core::Tensor::from_view(g.output(i)).to(core::Device::cpu());
      const auto values = want["values"].get<std::vector<double>>();
      INFO("output " << g.outputs()[i].name << ": troupe " << got.shape().to_string() << ", keras "
                     << want["shape"].dump());
      REQUIRE(static_cast<int64_t>(values.size()) == got.size());
      double worst = 0.0;
      int64_t at = 0;
      for (int64_t k = 0; k < got.size(); ++k) {
        const double err = std::fabs(got[k] - values[static_cast<size_t>(k)]) /
                           (o.abs_tol / o.rel_tol + std::fabs(values[static_cast<size_t>(k)]));
        if (err > worst) worst = err, at = k;
      }
      INFO("output " << g.outputs()[i].name << ": worst at " << at << ": troupe " << got[at]
                     << ", keras " << values[static_cast<size_t>(at)]);
      CHECK(worst <= o.rel_tol);
    }
  };
  run(false);
  if (o.fake_device) {
    DevicePass device;
    if (device.here()) run(true);
  }
}

}  // namespace troupe::test
