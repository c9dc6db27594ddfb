#pragma once

// Gradient checks for the layer graph's layers: a graph of one layer call (or a few) on
// random inputs, its analytic gradients — of the inputs, the weights and the tables' rows —
// against central differences of L = sum(r * y) for a fixed random r, on the CPU and again
// on the fake CUDA device (tests/core/fake_device.hpp), whose results must be the CPU's.
//
//   GraphCase g;
//   int x = g.graph.add_input("x", {ColumnKind::floats, {5}});
//   auto y = g.graph.call(make("Dense", R"({"name": "d", "units": 3})"), {x}).value();
//   g.graph.set_outputs(y, {"d"});
//   check_gradients(g);

#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/graph/graph.hpp"
#include "core/layers/layers.hpp"
#include "device_pass.hpp"

namespace troupe::test {

/// A layer from its class name and config JSON, or the test fails.
inline std::shared_ptr<core::graph::Operation> make(const std::string& cls,
                                                    const std::string& config) {
  auto l = core::layers::make_layer(cls, nlohmann::json::parse(config));
  INFO(cls << ": " << (l ? std::string() : l.error().message));
  REQUIRE(l.ok());
  return std::shared_ptr<core::graph::Operation>(std::move(*l));
}

struct GraphCase {
  core::graph::Graph graph;
  int64_t batch = 3;
  /// Ids for integer inputs are drawn in [0, id_range); strings from `words`.
  int64_t id_range = 5;
  std::vector<std::string> words = {"a", "b", "c"};
  uint64_t seed = 7;
  /// Whether the check runs the layers in training mode.
  bool training = true;
};

/// Sets the weight at `path` to `values` (in its shape), or the test fails.
inline void set_weight(core::graph::Graph& g, const std::string& path, std::vector<float> values) {
  for (const auto& w : g.weights())
    if (w.path == path) {
      REQUIRE(static_cast<int64_t>(values.size()) == w.weight().shape.num_elements());
      w.weight().value.set(core::Tensor(w.weight().shape, std::move(values)));
      return;
    }
  FAIL("no weight " << path);
}

/// A batch for the graph's inputs: floats uniform in [-1, 1] (away from 0 by 0.05, so
/// ReLU-like kinks are not straddled by the differences), ids, strings.
inline core::Batch random_batch(const GraphCase& g) {
  std::mt19937 rng(static_cast<unsigned>(g.seed));
  std::uniform_real_distribution<float> u(0.05f, 1.0f);
  std::uniform_int_distribution<int64_t> id(0, g.id_range - 1);
  core::Batch b;
  for (const auto& in : g.graph.inputs()) {
    core::Column c;
    c.name = in.name;
    c.kind = in.spec.kind;
    c.shape = in.spec.with_batch(g.batch);
    const int64_t n = c.shape.num_elements();
    for (int64_t i = 0; i < n; ++i) {
      if (c.kind == core::ColumnKind::floats)
        c.floats.push_back(rng() % 2 == 0 ? u(rng) : -u(rng));
      else if (c.kind == core::ColumnKind::ints)
        c.ints.push_back(id(rng));
      else
        c.strings.push_back(g.words[static_cast<size_t>(id(rng)) % g.words.size()]);
    }
    b.columns.push_back(std::move(c));
  }
  return b;
}

/// Gives every table of the fed graph rows from its held value (the rows of its ids), or
/// random ones when it holds none.
inline void give_rows(core::graph::Graph& g, uint64_t seed) {
  std::mt19937 rng(static_cast<unsigned>(seed));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (auto& t : g.tables()) {
    const auto& w = g.weights()[t.weight].weight();
    const int64_t width = w.shape[w.shape.rank() - 1];
    core::Tensor rows(core::Shape{static_cast<int64_t>(t.ids.size()), width});
    for (int64_t i = 0; i < rows.size(); ++i)
      rows[i] = u(rng);
    t.rows = std::move(rows);
  }
}

/// L = sum(r * y) over every output, with r fixed; returns L and, when `dys` is given, r.
inline double projected_loss(core::graph::Graph& g, std::vector<core::Tensor>* dys) {
  double loss = 0.0;
  std::mt19937 rng(123);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (size_t i = 0; i < g.outputs().size(); ++i) {
    core::Tensor y = core::Tensor::from_view(g.output(i)).to(core::Device::cpu());
    core::Tensor r(y.shape());
    for (int64_t k = 0; k < y.size(); ++k) {
      r[k] = u(rng);
      loss += static_cast<double>(r[k]) * y[k];
    }
    if (dys != nullptr) dys->push_back(r.to(g.device()));
  }
  return loss;
}

struct CheckOptions {
  double abs_tol = 2e-3, rel_tol = 2e-2;
  float eps = 1e-2f;
  /// At most this many elements checked per tensor (spread over it).
  int64_t samples = 24;
};

inline void check_close(double analytic, double numeric, const std::string& what,
                        const CheckOptions& o) {
  INFO(what << ": analytic " << analytic << ", numeric " << numeric);
  CHECK(std::fabs(analytic - numeric) <=
        o.abs_tol + o.rel_tol * std::max(std::fabs(analytic), std::fabs(numeric)));
}

/// The check itself, on the graph's current device.
inline void check_gradients_here(GraphCase& c, const CheckOptions& o) {
  auto& g = c.graph;
  core::Batch batch = random_batch(c);
  REQUIRE(g.feed(batch).ok());
  give_rows(g, c.seed + 1);
  auto run = [&]() {
    auto st = g.forward(c.training, /*seed=*/99);
    INFO((st ? std::string() : st.error().message));
    REQUIRE(st.ok());
    return projected_loss(g, nullptr);
  };
  run();
  std::vector<core::Tensor> dys;
  projected_loss(g, &dys);
  std::vector<core::ConstTensorView> dviews(dys.begin(), dys.end());
  g.backward(dviews);
  // Weights.
  for (size_t w = 0; w < g.weights().size(); ++w) {
    const auto& ref = g.weights()[w];
    auto& weight = ref.weight();
    if (!g.trains(ref) || weight.table) continue;
    core::Tensor analytic = g.gradient(w).to(core::Device::cpu());
    core::Tensor host = weight.value.to(core::Device::cpu());
    const int64_t n = host.size();
    const int64_t step = std::max<int64_t>(1, n / o.samples);
    for (int64_t i = 0; i < n; i += step) {
      auto loss_at = [&](float v) {
        core::Tensor h = host;
        h[i] = v;
        weight.value.set(h);
        return run();
      };
      const float x = host[i];
      const double numeric = (loss_at(x + o.eps) - loss_at(x - o.eps)) / (2.0 * o.eps);
      weight.value.set(host);
      check_close(analytic[i], numeric, ref.path + "[" + std::to_string(i) + "]", o);
    }
  }
  // Table rows.
  run();
  g.backward(dviews);
  for (auto& t : g.tables()) {
    core::Tensor analytic = t.row_grads.to(core::Device::cpu());
    core::Tensor rows = t.rows.to(core::Device::cpu());
    const int64_t n = rows.size();
    const int64_t step = std::max<int64_t>(1, n / o.samples);
    for (int64_t i = 0; i < n; i += step) {
      auto loss_at = [&](float v) {
        core::Tensor r = rows;
        r[i] = v;
        t.rows = r;
        return run();
      };
      const float x = rows[i];
      const double numeric = (loss_at(x + o.eps) - loss_at(x - o.eps)) / (2.0 * o.eps);
      t.rows = rows;
      check_close(analytic[i], numeric,
                  g.weights()[t.weight].path + " row grads[" + std::to_string(i) + "]", o);
    }
  }
}

/// A layer's input gradient is checked through a trainable layer in front of it (a Dense on
/// the last axis, see with_dense_in_front): that kernel's gradient is its input's transpose
/// times the tested layer's input gradient, so a wrong one shows there.
inline int with_dense_in_front(GraphCase& c, int x, const std::string& name) {
  const int64_t width = c.graph.spec(x).shape.back();
  auto d = make("Dense", R"({"name": ")" + name + R"(", "units": )" + std::to_string(width) + "}");
  auto out = c.graph.call(d, {x});
  REQUIRE(out.ok());
  return (*out)[0];
}

/// Runs check_gradients_here on the CPU, then moves the graph to a CUDA device — the fake
/// one, or in gpu_layer_tests the GPU when there is one (device_pass.hpp) — and runs it
/// again there.
inline void check_gradients(GraphCase& c, const CheckOptions& o = {}) {
  SECTION("cpu") {
    check_gradients_here(c, o);
  }
  SECTION(kDevicePassName) {
    DevicePass device;
    if (!device.here()) return;
    // Whatever happens in the check, the graph leaves the device before it goes.
    struct BackToCpu {
      core::graph::Graph& g;
      ~BackToCpu() { (void)g.to(core::Device::cpu()); }
    } back{c.graph};
    REQUIRE(c.graph.to(core::Device::cuda(0)).ok());
    check_gradients_here(c, o);
  }
}

}  // namespace troupe::test
