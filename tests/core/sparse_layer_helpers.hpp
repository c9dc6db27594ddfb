#pragma once

// What tests/core's sparse-layer suites (test_sparse_layers.cpp, test_conv_layers.cpp) share:
// columns and batches made by hand, a graph of one layer run on them, weights and tables
// set, values compared, and the refusal a config gets.

#include <catch2/catch.hpp>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "graph_check.hpp"

namespace troupe::test::sparse {

using namespace troupe::core;
using namespace troupe::core::graph;
using namespace troupe::core::layers;

using troupe::test::GraphCase;
using troupe::test::make;

inline Column float_column(const std::string& name, Shape shape, std::vector<float> values) {
  Column c;
  c.name = name;
  c.kind = ColumnKind::floats;
  c.shape = shape;
  c.floats = std::move(values);
  return c;
}

inline Column int_column(const std::string& name, Shape shape, std::vector<int64_t> values) {
  Column c;
  c.name = name;
  c.kind = ColumnKind::ints;
  c.shape = shape;
  c.ints = std::move(values);
  return c;
}

inline Column string_column(const std::string& name, Shape shape, std::vector<std::string> values) {
  Column c;
  c.name = name;
  c.kind = ColumnKind::strings;
  c.shape = shape;
  c.strings = std::move(values);
  return c;
}

inline Batch batch_of(std::vector<Column> columns) {
  Batch b;
  b.columns = std::move(columns);
  return b;
}

using troupe::test::set_weight;

inline std::vector<float> iota(int64_t n, float from = 1.0f) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    v[static_cast<size_t>(i)] = from + static_cast<float>(i);
  return v;
}

// One layer on one input; its output.
inline Tensor run_one(const std::string& cls, const std::string& config, TensorSpec spec, Column in,
                      const std::vector<std::pair<std::string, std::vector<float>>>& weights = {}) {
  Graph g;
  const int x = g.add_input("x", spec);
  auto y = g.call(make(cls, config), {x});
  INFO((y ? std::string() : y.error().message));
  REQUIRE(y.ok());
  REQUIRE(g.set_outputs(*y, {"y"}).ok());
  for (const auto& [path, values] : weights)
    set_weight(g, path, values);
  in.name = "x";
  REQUIRE(g.feed(batch_of({in})).ok());
  auto st = g.forward(false);
  INFO((st ? std::string() : st.error().message));
  REQUIRE(st.ok());
  return Tensor::from_view(g.output(0));
}

inline void check_values(const Tensor& got, const std::vector<float>& want) {
  REQUIRE(got.size() == static_cast<int64_t>(want.size()));
  for (int64_t i = 0; i < got.size(); ++i) {
    INFO("element " << i);
    CHECK(got[i] == Approx(want[static_cast<size_t>(i)]).epsilon(1e-6));
  }
}

// One forward call of a built host layer (Hashing, a lookup) on `in`, with what the call
// reads kept alive beside it.
struct HostCall {
  std::unique_ptr<CallState> state;
  Tensor ints;
  Call call;
  Status status;
};

inline std::unique_ptr<HostCall> forward_host(Operation& layer, const Column& in) {
  auto h = std::make_unique<HostCall>();
  h->state = layer.make_state();
  h->ints = Tensor(in.shape, DType::int64, Device::cpu());
  std::copy(in.ints.begin(), in.ints.end(), h->ints.data_as<int64_t>());
  h->call.state = h->state.get();
  h->call.inputs = {Ref{in.kind,
                        in.kind == ColumnKind::ints ? ConstTensorView(h->ints) : ConstTensorView(),
                        in.kind == ColumnKind::strings ? &in.strings : nullptr, in.shape}};
  h->status = layer.forward(h->call);
  return h;
}

// A host layer (Hashing, a lookup) run on one input; its int64 output.
inline std::vector<int64_t> run_host(const std::string& cls, const std::string& config,
                                     const Column& in) {
  auto layer = make(cls, config);
  REQUIRE(layer->on_host());
  auto out = layer->build({TensorSpec{in.kind, {}}});
  INFO((out ? std::string() : out.error().message));
  REQUIRE(out.ok());
  CHECK((*out)[0].kind == ColumnKind::ints);
  auto h = forward_host(*layer, in);
  INFO((h->status ? std::string() : h->status.error().message));
  REQUIRE(h->status.ok());
  const Ref& r = h->call.outputs.at(0);
  CHECK(r.shape == in.shape);
  return std::vector<int64_t>(r.ints(), r.ints() + r.shape.num_elements());
}

inline Error host_error(const std::string& cls, const std::string& config, const Column& in) {
  auto layer = make(cls, config);
  REQUIRE(layer->build({TensorSpec{in.kind, {}}}).ok());
  auto h = forward_host(*layer, in);
  REQUIRE_FALSE(h->status.ok());
  return h->status.error();
}

inline std::string refusal(const std::string& cls, const std::string& config) {
  auto l = make_layer(cls, nlohmann::json::parse(config));
  REQUIRE_FALSE(l.ok());
  return l.error().message;
}

// Gives every table of the fed graph its rows from full[id * width ...].
inline void give_table(Graph& g, const std::vector<float>& full) {
  for (auto& t : g.tables()) {
    const auto& w = g.weights()[t.weight].weight();
    const int64_t width = w.shape[1];
    Tensor rows(Shape{static_cast<int64_t>(t.ids.size()), width});
    for (size_t r = 0; r < t.ids.size(); ++r)
      for (int64_t j = 0; j < width; ++j)
        rows[static_cast<int64_t>(r) * width + j] = full[static_cast<size_t>(t.ids[r] * width + j)];
    t.rows = std::move(rows);
  }
}

}  // namespace troupe::test::sparse
