// A model's replica on one process (its layers or graph, its table, its device) and the
// steps every worker registers for a model (register_model): the half of Model that runs
// batches; model.cpp is the half that owns variables, checkpoints and evaluation.
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

namespace {

// A device backend that failed skips its kernels and gives a NaN loss: its own error (the
// failed call, named) is what the step reports.
core::Status device_status(core::Device device, float loss) {
  if (std::isfinite(loss) || device.is_cpu()) return {};
  auto backend = core::backend_for(device);
  if (!backend) return backend.error();
  return (*backend)->synchronize();
}

}  // namespace

std::vector<core::Initializer> initializers(const ModelSpec& spec,
                                            const std::vector<core::Parameter>& params) {
  std::vector<core::Initializer> out;
  uint64_t seed = spec.seed;
  for (const auto& p : params) {
    if (spec.ctr && p.name == ctr_table) {  // as Keras' Embedding: uniform in [-0.05, 0.05]
      out.push_back({core::Initializer::Kind::random_uniform, 0.05f, seed++});
      continue;
    }
    const bool kernel = p.value->shape().rank() >= 2;
    out.push_back(
        {kernel ? core::Initializer::Kind::glorot_uniform : core::Initializer::Kind::zeros, 0.0f,
         seed++});
  }
  return out;
}

std::vector<size_t> gradient_order(Replica& r) {
  if (r.graph) return r.graph->graph().gradient_order();
  return {};
}

core::Expected<BatchStats> run_batch(Replica& r, const core::Batch& batch, bool backward,
                                     const std::function<void(size_t)>& gradient_done) {
  if (batch.size() == 0) return BatchStats{};
  if (r.graph) {
    auto& g = *r.graph;
    return g.run(batch, backward, held_tables(g), r.loss_scale ? r.loss_scale->scale() : 1.0f,
                 gradient_done);
  }
  if (r.ctr) {
    // The rows of the batch's ids from the local table.
    if (!r.hold_table())
      return make_error(Errc::internal, "a worker's replica computed on a table it never holds");
    if (auto st = feed_ctr(r, batch); !st) return st.error();
    const int64_t rows = r.table.shape().rank() == 2 ? r.table.shape()[0] : 0;
    const int64_t width = r.table_shape[1];
    if (!r.dynamic)
      for (int64_t id : r.ids())
        if (id < 0 || id >= rows)
          return make_error(Errc::out_of_range,
                            "id " + std::to_string(id) + " outside the table '" +
                                std::string(ctr_table) + "' of " + std::to_string(rows) + " rows");
    const std::vector<int64_t>& unique = r.ids();
    r.rows.resize(core::Shape{static_cast<int64_t>(unique.size()), width});
    for (size_t i = 0; i < unique.size(); ++i) {
      float* to = r.rows.data() + static_cast<int64_t>(i) * width;
      int64_t row = unique[i];
      if (r.dynamic) {  // a key without a row scores with zeros, as on the PS tasks
        auto it = r.row_of.find(row);
        row = it == r.row_of.end() ? -1 : it->second;
      }
      if (row < 0)
        std::fill_n(to, width, 0.0f);
      else
        std::copy_n(r.table.data() + row * width, width, to);
    }
    return run_ctr_batch(r, batch, r.rows, backward);
  }
  return make_error(Errc::internal, "a replica of no model computed a batch");
}

core::Status feed_ctr(Replica& r, const core::Batch& batch) {
  return r.ctr->feed(batch);
}

core::Expected<BatchStats> run_ctr_batch(Replica& r, const core::Batch& batch,
                                         core::ConstTensorView rows, bool backward) {
  if (batch.size() == 0) return BatchStats{};
  if (auto st = r.ctr->give_rows(rows); !st) return st.error();
  auto logits = r.ctr->forward(/*training=*/backward);
  if (!logits) return logits.error();
  r.ctr_loss.set_grad_scale(r.loss_scale ? r.loss_scale->scale() : 1.0f);
  auto loss = r.ctr_loss.forward(*logits, batch.labels.data());
  if (!loss) return loss.error();
  if (auto st = device_status(r.device, *loss); !st) return st.error();
  if (!std::isfinite(*loss))
    return make_error(Errc::invalid_argument, "loss is not finite (" + std::to_string(*loss) + ")");
  const auto n = batch.size();
  BatchStats stats{static_cast<double>(*loss) * static_cast<double>(n), 0, n, 1};
  // Binary accuracy and the AUC's histograms (core::AUC's 200 buckets), where the logits are.
  stats.auc_pos.assign(200, 0);
  stats.auc_neg.assign(200, 0);
  auto backend = core::backend_for(r.device);
  if (!backend) return backend.error();
  stats.correct =
      (*backend)->binary_metrics(*logits, r.ctr_loss.labels(), stats.auc_pos, stats.auc_neg);
  if (backward) r.ctr->backward(r.ctr_loss.backward());
  return stats;
}

Replica::Replica(const ModelSpec& s, bool with_table) {
  if (s.keras) {
    // Initial values: the file's weights, or the layers' initializers (a table's, when it
    // is first held).
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
    return;
  }
  if (s.ctr) {
    dynamic = s.dynamic_table.has_value();
    // A dynamic table's rows are keyed (table_rows unused): its Embeddings check no range.
    ctr = std::make_unique<core::keras::CtrGraph>(*s.ctr, std::max<int64_t>(s.table_rows, 1),
                                                  dynamic);
    params = ctr->parameters();
    table_shape = core::Shape{dynamic ? 0 : s.table_rows, s.ctr->row_width()};
    table_index = static_cast<int>(params.size());
    params.push_back({ctr_table, &table, &table_grad});
  } else {
    status = core::make_error(
        core::Errc::invalid_argument,
        "model '" + s.name + "' has no model: give ModelSpec::keras (a Keras graph) or ::ctr");
    return;
  }
  for (const auto& p : params)
    names.push_back(p.name);
  const auto inits = initializers(s, params);
  for (size_t i = 0; i < params.size(); ++i) {
    if (static_cast<int>(i) == table_index) {
      table_init = inits[i];
      table_wanted = with_table;
      if (dynamic) {  // rows come with their keys (set_weights)
        table = core::Tensor(table_shape);
        table_held = with_table;
      }
      continue;
    }
    *params[i].value = core::initialize(params[i].value->shape(), inits[i]);
  }
}

bool Replica::hold_table() {
  if (graph) {
    if (!table_wanted) return false;
    for (const auto& ref : graph->graph().weights()) {
      auto& w = ref.weight();
      if (w.table && !w.keyed && w.value.shape() != w.shape)
        w.value = core::initialize(w.shape, w.init);
    }
    return true;
  }
  if (table_held || !ctr) return true;
  if (!table_wanted) return false;
  table = core::initialize(table_shape, table_init);
  table_held = true;
  return true;
}

std::vector<std::string> Replica::dense_names() const {
  std::vector<std::string> out;
  for (size_t i = 0; i < names.size(); ++i)
    if (static_cast<int>(i) != table_index) out.push_back(names[i]);
  return out;
}

core::Status Replica::place(const ModelSpec& spec) {
  if (!status) return status;  // the model could not be made: every step says why
  if (placed) return {};
  auto d = select_device(spec.device);
  if (!d) return d.error();
  auto p = select_precision(spec.precision, *d);
  if (!p) return p.error();
  if (graph) {
    if (auto st = graph->graph().to(*d, *p); !st) return st;
    graph->device = *d;
  } else if (ctr) {
    if (auto st = ctr->to(*d, *p); !st) return st;
  }
  device = *d;
  precision = *p;
  if (core::needs_loss_scale(*p)) loss_scale.emplace();
  placed = true;
  return {};
}

core::Status Replica::assign_dense(std::vector<core::Tensor> values) {
  std::vector<core::Parameter> dense;
  for (size_t i = 0; i < params.size(); ++i)
    if (static_cast<int>(i) != table_index) dense.push_back(params[i]);
  return core::assign(dense, std::move(values));
}

core::Status Replica::assign(std::vector<core::Tensor> values) {
  if (values.size() != params.size())
    return make_error(Errc::internal, "expected " + std::to_string(params.size()) +
                                          " values, got " + std::to_string(values.size()));
  return core::assign(params, std::move(values));
}

std::vector<std::pair<std::string, core::ConstTensorView>> Replica::dense_grads() {
  host_grads.resize(params.size());
  std::vector<std::pair<std::string, core::ConstTensorView>> out;
  for (size_t i = 0; i < params.size(); ++i)
    if (static_cast<int>(i) != table_index)
      out.emplace_back(names[i], core::on(core::Device::cpu(), *params[i].grad, host_grads[i]));
  return out;
}

core::ConstTensorView Replica::row_grads() {
  return ctr->row_grads();
}

bool Replica::finish_scaled_step() {
  if (!loss_scale) return true;
  std::vector<core::TensorView> grads;
  for (size_t i = 0; i < params.size(); ++i)
    if (static_cast<int>(i) != table_index) grads.push_back(*params[i].grad);
  if (ctr) grads = ctr->gradients();
  if (graph) {
    grads.clear();
    for (size_t w = 0; w < params.size(); ++w)
      if (graph->trains[w] && !graph->table[w]) grads.push_back(*params[w].grad);
    for (auto& t : graph->tables())
      grads.push_back(t.row_grads);
  }
  auto backend = core::backend_for(device);
  return backend && core::unscale_gradients(*loss_scale, **backend, grads);
}

core::Expected<std::shared_ptr<const std::vector<core::Example>>> EvalData::get(
    const ModelSpec& spec) {
  std::lock_guard<std::mutex> lock(mu);
  if (examples) return examples;
  if (!spec.eval_examples)
    return make_error(
        Errc::invalid_argument,
        "model '" + spec.name + "' has no evaluation examples (ModelSpec::eval_examples)");
  auto loaded = spec.eval_examples();
  if (!loaded) return loaded.error();
  examples = std::make_shared<const std::vector<core::Example>>(std::move(*loaded));
  return examples;
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

core::Expected<core::Batch> eval_batch(const std::vector<core::Example>& examples, int64_t size,
                                       int64_t index) {
  const auto n = static_cast<int64_t>(examples.size());
  if (size <= 0 || index < 0 || index * size >= n)
    return make_error(Errc::out_of_range, "evaluation batch " + std::to_string(index) + " of " +
                                              std::to_string(n) + " examples in batches of " +
                                              std::to_string(size) + " does not exist");
  const auto first = examples.begin() + index * size;
  const auto last = examples.begin() + std::min(n, (index + 1) * size);
  return core::collate(std::vector<core::Example>(first, last));
}

namespace {

// A CTR model's step on a worker: the dense variables whole, the table's rows of this
// batch only; with `train`, the gradients pushed back the same way.
core::Expected<BatchStats> ctr_step(detail::Replica& r, StepContext& ctx, const core::Batch& batch,
                                    bool train) {
  if (auto st = detail::feed_ctr(r, batch); !st) return st.error();
  auto values = ctx.pull(r.dense_names());
  if (!values) return values.error();
  if (auto st = r.assign_dense(std::move(*values)); !st) return st.error();
  auto rows = ctx.pull_rows(ctr_table, r.ids());
  if (!rows) return rows.error();
  auto stats = detail::run_ctr_batch(r, batch, *rows, train);
  if (!stats || !train) return stats;
  if (!r.finish_scaled_step()) return stats;  // float16 overflow: nothing pushed
  if (auto st = ctx.push(r.dense_grads()); !st) return st.error();
  if (auto st = ctx.push_rows(ctr_table, r.ids(), r.row_grads()); !st) return st.error();
  return stats;
}

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
  if (spec.keras) return register_graph_model(registry, spec);
  // One replica per process, shared by the two steps; a worker runs its steps one at a time.
  // A worker's replica has no table: it pulls the rows each batch uses.
  struct Shared {
    detail::Replica replica;
    detail::EvalData eval;
    explicit Shared(const ModelSpec& s) : replica(s, /*with_table=*/false) {}
  };
  auto shared = std::make_shared<Shared>(spec);
  registry.add_step(
      spec.name + "/train",
      [shared, spec](StepContext& ctx, PerWorkerDataset ds) -> core::Expected<BatchStats> {
        auto& r = shared->replica;
        // On the worker's device (its GPU by local rank), from its first step.
        if (auto st = r.place(spec); !st) return st.error();
        auto batch = ctx.next_batch(ds);
        if (!batch) return batch.error();
        if (!*batch)
          return make_error(Errc::out_of_range, "per-worker dataset '" + ds.name + "' ended");
        if (r.ctr) return ctr_step(r, ctx, **batch, /*train=*/true);
        auto values = ctx.pull(r.names);
        if (!values) return values.error();
        if (auto st = r.assign(std::move(*values)); !st) return st.error();
        auto stats = detail::run_batch(r, **batch, /*backward=*/true);
        if (!stats || !r.finish_scaled_step()) return stats;
        if (auto st = ctx.push(r.dense_grads()); !st) return st.error();
        return stats;
      });
  registry.add_step(spec.name + "/evaluate",
                    [shared, spec](StepContext& ctx, int64_t index) -> core::Expected<BatchStats> {
                      auto& r = shared->replica;
                      if (auto st = r.place(spec); !st) return st.error();
                      auto examples = shared->eval.get(spec);
                      if (!examples) return examples.error();
                      auto batch = eval_batch(**examples, spec.eval_batch_size, index);
                      if (!batch) return batch.error();
                      if (r.ctr) return ctr_step(r, ctx, *batch, /*train=*/false);
                      auto values = ctx.pull(r.names);
                      if (!values) return values.error();
                      if (auto st = r.assign(std::move(*values)); !st) return st.error();
                      return detail::run_batch(r, *batch, /*backward=*/false);
                    });
}

}  // namespace troupe
