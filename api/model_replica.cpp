// A model's replica on one process (its graph, its tables, its device) and the steps every
// worker registers for a model (register_model): the half of Model that runs batches;
// model.cpp is the half that owns variables, checkpoints and evaluation.
#include "troupe/model.hpp"

#include <algorithm>
#include <cmath>
#include <mutex>

#include "api/impl.hpp"
#include "api/model_state.hpp"
#include "core/metrics.hpp"
#include "core/partitioner.hpp"
#include "troupe/coordinator.hpp"
#include "troupe/devices.hpp"
#include "troupe/registry.hpp"
#include "troupe/strategy.hpp"

namespace troupe {

using core::Errc;
using core::make_error;

namespace detail {

core::Expected<BatchStats> run_batch(Replica& r, const core::Batch& batch, bool backward,
                                     const std::function<void(size_t)>& gradient_done) {
  if (batch.size() == 0) return BatchStats{};
  auto& g = *r.graph;
  return g.run(batch, backward, held_tables(g), g.loss_scale ? g.loss_scale->scale() : 1.0f,
               gradient_done);
}

Replica::Replica(const ModelSpec& s, bool with_table) {
  if (!s.keras) {
    status =
        make_error(Errc::invalid_argument, "model '" + s.name +
                                               "' has no graph: give ModelSpec::keras (a .keras "
                                               "file, to_json()'s JSON, or a built-in model's)");
    return;
  }
  // Initial values: the file's weights, or the layers' initializers (a table's, when it is
  // first held).
  auto g = GraphReplica::make(*s.keras, s.keras_options);
  if (!g) {
    status = g.error();
    return;
  }
  graph = std::move(*g);
  auto& ws = graph->graph().weights();
  for (size_t w = 0; w < ws.size(); ++w) {
    params.push_back({graph->names[w], &ws[w].weight().value, &graph->graph().gradient(w)});
    names.push_back(graph->names[w]);
  }
  table_wanted = with_table;
}

bool Replica::hold_table() {
  if (!table_wanted || !graph) return false;
  for (const auto& ref : graph->graph().weights()) {
    auto& w = ref.weight();
    if (w.table && !w.keyed && w.value.shape() != w.shape)
      w.value = core::initialize(w.shape, w.init);
  }
  return true;
}

core::Status Replica::place(const ModelSpec& spec) {
  if (!status) return status;  // the model could not be made: every step says why
  if (placed) return {};
  if (auto st = graph->place(spec.device, spec.precision); !st) return st;
  device = graph->device;
  precision = graph->graph().precision();
  placed = true;
  return {};
}

core::LossScale* Replica::loss_scale() const {
  return graph && graph->loss_scale ? &*graph->loss_scale : nullptr;
}

core::Expected<std::shared_ptr<const std::vector<core::Batch>>> EvalData::get_batches(
    const ModelSpec& spec) {
  std::lock_guard<std::mutex> lock(mu);
  if (batches) return batches;
  if (!spec.eval_batches)
    return make_error(Errc::invalid_argument,
                      "model '" + spec.name + "' has no validation data (ModelSpec::eval_batches)");
  auto loaded = spec.eval_batches();
  if (!loaded) return loaded.error();
  batches = std::make_shared<const std::vector<core::Batch>>(std::move(*loaded));
  return batches;
}

}  // namespace detail

namespace {

// A Keras model's steps on every worker, as register_keras's but for a model given in the
// spec (the data from any registered dataset of named columns): "<name>/train" and
// "<name>/evaluate" take a batch of the worker's iterator, "<name>/validate" batch i of
// ModelSpec::eval_batches (each worker loads its own copy, once).
void register_graph_model(Registry& registry, const ModelSpec& spec) {
  struct Shared {
    std::mutex mu;
    core::Expected<std::unique_ptr<detail::GraphReplica>> replica;
    bool placed = false;
    detail::EvalData eval;
    explicit Shared(const ModelSpec& s)
        : replica(detail::GraphReplica::make(*s.keras, s.keras_options)) {}
  };
  auto shared = std::make_shared<Shared>(spec);
  // The worker's replica, on its device from its first step.
  auto replica = [shared, spec]() -> core::Expected<detail::GraphReplica*> {
    std::lock_guard<std::mutex> lock(shared->mu);
    if (!shared->replica) return shared->replica.error();
    auto& r = **shared->replica;
    if (!shared->placed) {
      if (auto st = r.place(spec.device, spec.precision); !st) return st.error();
      shared->placed = true;
    }
    return &r;
  };
  auto batch_step = [replica](bool train) {
    return [replica, train](StepContext& ctx, PerWorkerDataset ds) -> core::Expected<BatchStats> {
      auto batch = ctx.next_batch(ds);
      if (!batch) return batch.error();
      if (!*batch)
        return make_error(Errc::out_of_range, "per-worker dataset '" + ds.name + "' ended");
      auto r = replica();
      if (!r) return r.error();
      return detail::worker_step(ctx, **r, **batch, train);
    };
  };
  registry.add_step(spec.name + "/train", batch_step(true));
  registry.add_step(spec.name + "/evaluate", batch_step(false));
  registry.add_step(
      spec.name + "/validate",
      [shared, spec, replica](StepContext& ctx, int64_t index) -> core::Expected<BatchStats> {
        auto r = replica();
        if (!r) return r.error();
        auto batches = shared->eval.get_batches(spec);
        if (!batches) return batches.error();
        return detail::validation_step(ctx, **r, **batches, index);
      });
}

}  // namespace

void register_model(Registry& registry, const ModelSpec& spec) {
  register_graph_model(registry, spec);
}

}  // namespace troupe
