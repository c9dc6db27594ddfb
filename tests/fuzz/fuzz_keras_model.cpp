// A model's description (config.json, or model.to_json()) made into a graph, and its
// compile_config read against it: the bounded JSON reading every model file goes through,
// every layer and operation factory's reading of its arguments (constants, slices, lists),
// the builder's reading of nodes, inputs and outputs, and compile()'s losses, metrics and
// optimizer. Whatever the JSON says, an error or a graph, never a crash; graphs that build
// run one step forward and back on zeros.
#include <nlohmann/json.hpp>

#include "core/graph/compile.hpp"
#include "core/json_limits.hpp"
#include "core/keras/compile_config.hpp"
#include "core/keras/keras_model.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace troupe::core;
  const auto parsed =
      parse_json_bounded(std::string(reinterpret_cast<const char*>(data), size), "fuzz");
  if (!parsed) return 0;
  const auto& doc = *parsed;
  auto model = keras::build_keras_model(doc);
  if (!model) return 0;
  auto& g = *model->graph;
  // Small graphs only: a fuzzed Dense(units=1e9) is refused by its size, not allocated.
  if (g.num_parameters() > (int64_t{1} << 20)) return 0;
  if (doc.contains("compile_config")) (void)keras::parse_compile_config(doc["compile_config"], g);
  Batch batch;
  for (const auto& in : g.inputs()) {
    if (in.spec.per_example() > 4096) return 0;
    Column c;
    c.name = in.name;
    c.kind = in.spec.kind;
    c.shape = in.spec.with_batch(2);
    const auto n = static_cast<size_t>(c.shape.num_elements());
    if (c.kind == ColumnKind::floats) c.floats.assign(n, 0.0f);
    if (c.kind == ColumnKind::ints) c.ints.assign(n, 0);
    if (c.kind == ColumnKind::strings) c.strings.assign(n, "a");
    batch.columns.push_back(std::move(c));
  }
  if (!g.feed(batch)) return 0;
  for (auto& t : g.tables()) {
    const auto& w = g.weights()[t.weight].weight();
    t.rows = Tensor(Shape{static_cast<int64_t>(t.ids.size()), w.shape[w.shape.rank() - 1]});
  }
  if (!g.forward(/*training=*/true, 1)) return 0;
  std::vector<Tensor> dys;
  std::vector<ConstTensorView> views;
  for (size_t i = 0; i < g.outputs().size(); ++i)
    dys.emplace_back(g.output(i).shape());
  for (const auto& d : dys)
    views.push_back(d);
  g.backward(views);
  return 0;
}
