#include "troupe/model.hpp"

#include <cmath>
#include <mutex>

#include "api/impl.hpp"
#include "api/model_state.hpp"
#include "core/keras/builtin_models.hpp"
#include "core/metrics.hpp"
#include "core/partitioner.hpp"
#include "troupe/coordinator.hpp"
#include "troupe/devices.hpp"
#include "troupe/registry.hpp"
#include "troupe/strategy.hpp"

namespace troupe {

using core::Errc;
using core::make_error;

namespace {

// A Keras model without a name runs the generic steps every worker registers
// (register_keras); one with a name, those register_model registered for it.
ModelSpec named(ModelSpec spec) {
  if (spec.keras && spec.name.empty()) spec.name = "keras";
  return spec;
}

}  // namespace

Model::Model(ModelSpec spec) : s_(std::make_unique<State>(named(std::move(spec)))) {}
Model::~Model() {
  if (s_->strategy != nullptr) s_->strategy->impl().before_destroy.erase(this);
}

Model::State::State(ModelSpec s) : spec(std::move(s)), replica(spec) {
  if (!replica.status) {
    optimizer_error = replica.status.error();
    return;
  }
  // The compiled optimizer; slots for the trainable weights (a table's once it is held).
  optimizer = core::make_optimizer(replica.graph->objective->config().optimizer);
  const auto& ws = replica.graph->graph().weights();
  for (size_t w = 0; w < ws.size(); ++w) {
    const auto& weight = ws[w].weight();
    if (!replica.graph->trains[w])
      slots.emplace_back();
    else if (weight.table && weight.value.shape() != weight.shape)
      slots.push_back(optimizer->make_slots(core::Shape{0, weight.shape[1]}));
    else
      slots.push_back(optimizer->make_slots(weight.shape));
  }
}

void Model::State::hold_table() {
  if (!replica.hold_table() || !optimizer) return;
  const auto& ws = replica.graph->graph().weights();
  for (size_t w = 0; w < ws.size(); ++w) {
    const auto& weight = ws[w].weight();
    if (weight.table && replica.graph->trains[w] && !slots[w].slots.empty() &&
        slots[w].slots[0].shape() != weight.shape)
      slots[w] = optimizer->make_slots(weight.shape);
  }
}

core::Status Model::State::place() {
  if (replica.placed) return {};
  if (auto st = replica.place(spec); !st) return st;
  if (replica.device.is_cpu()) return {};
  // The slots live with their variables.
  for (size_t i = 0; i < slots.size(); ++i) {
    const auto& v = *replica.params[i].value;
    if (v.device() == replica.device)
      for (auto& t : slots[i].slots)
        t = t.to(replica.device);
  }
  return {};
}

const ModelSpec& Model::spec() const {
  return s_->spec;
}
std::vector<core::Parameter>& Model::parameters() {
  return s_->replica.params;
}
core::Device Model::device() const {
  return s_->replica.device;
}
core::Precision Model::precision() const {
  return s_->replica.precision;
}
const core::LossScale* Model::loss_scale() const {
  return s_->replica.loss_scale();
}
ParameterServerStrategy* Model::strategy() {
  return s_->strategy;
}
const std::vector<Variable>& Model::variables() const {
  return s_->variables;
}
ClusterCoordinator* Model::coordinator_if_made() {
  return s_->coordinator.get();
}

namespace {

// A Keras model's variables on the PS tasks: each trainable weight with the compiled
// optimizer (a table sharded by the partitioner, or a dynamic table), each non-trainable
// one (a BatchNormalization's moving statistics) with SGD at rate 1, so that the changes
// workers push move it. Values this process holds (the file's weights) are set there.
core::Expected<std::vector<Variable>> create_graph_variables(const ModelSpec& spec,
                                                             detail::GraphReplica& g,
                                                             ParameterServerStrategy& strategy) {
  const auto& ws = g.graph().weights();
  const auto& optimizer = g.objective->config().optimizer;
  std::vector<Variable> vars;
  for (size_t w = 0; w < ws.size(); ++w) {
    const auto& weight = ws[w].weight();
    const bool held = weight.value.shape() == weight.shape;
    core::Expected<Variable> v = [&]() -> core::Expected<Variable> {
      if (weight.table && weight.keyed) {
        DynamicTableSpec t = spec.keras_options.dynamic_tables.at(ws[w].layer->name());
        t.width = weight.shape[1];
        return strategy.create_dynamic_table(g.names[w], t, weight.init, optimizer);
      }
      if (!g.trains[w]) {
        core::OptimizerConfig moves;  // w -= 1 * (before - after): the worker's change
        moves.kind = core::OptimizerConfig::Kind::sgd;
        moves.learning_rate = 1.0f;
        return strategy.create_variable(g.names[w], weight.shape, weight.init, moves);
      }
      return strategy.create_variable(g.names[w], weight.shape, weight.init, optimizer);
    }();
    if (!v) return v.error();
    if (held && !weight.keyed) {
      const core::Tensor value = weight.value.to(core::Device::cpu());
      if (auto st = strategy.assign(*v, value); !st) return st.error();
    }
    vars.push_back(*v);
  }
  return vars;
}

}  // namespace

core::Status Model::attach(ParameterServerStrategy& strategy) {
  if (s_->strategy == &strategy) return {};
  if (s_->strategy != nullptr)
    return make_error(Errc::invalid_argument,
                      "model '" + s_->spec.name + "' is attached to another strategy");
  if (!s_->optimizer) return s_->optimizer_error;
  auto vars = create_graph_variables(s_->spec, *s_->replica.graph, strategy);
  if (!vars) return vars.error();
  s_->strategy = &strategy;
  s_->variables = std::move(*vars);
  // Destroyed first, the strategy detaches this model (and ends its coordinator).
  strategy.impl().before_destroy[this] = [s = s_.get()] {
    s->coordinator.reset();
    s->strategy = nullptr;
    s->variables.clear();
  };
  return {};
}

core::Expected<ClusterCoordinator*> Model::coordinator(const CoordinatorOptions& options) {
  if (s_->coordinator) return s_->coordinator.get();
  if (s_->strategy == nullptr)
    return make_error(Errc::invalid_argument,
                      "model '" + s_->spec.name + "' is not attached to a ParameterServerStrategy");
  auto c = ClusterCoordinator::make(*s_->strategy, options);
  if (!c) return c.error();
  s_->coordinator = std::move(*c);
  return s_->coordinator.get();
}

core::Status Model::pull() {
  if (s_->strategy == nullptr) return {};
  auto& r = s_->replica;
  for (size_t w = 0; w < s_->variables.size(); ++w) {  // the dense weights; tables stay there
    if (r.graph->table[w]) continue;
    auto t = s_->strategy->read(s_->variables[w]);
    if (!t) return t.error();
    r.params[w].value->set(*t);
  }
  return {};
}

core::Checkpoint Model::weights() {
  auto& r = s_->replica;
  if (s_->strategy == nullptr) s_->hold_table();
  core::Checkpoint c;
  if (!r.graph) return c;
  for (size_t w = 0; w < r.params.size(); ++w) {
    const auto& weight = r.graph->graph().weights()[w].weight();
    if (weight.value.shape() != weight.shape && !weight.keyed) continue;  // a table not held
    c.tensors[r.names[w]] = weight.value.to(core::Device::cpu());
    auto keys = r.graph->row_of.find(w);
    if (keys != r.graph->row_of.end()) {
      std::vector<int64_t> order(keys->second.size());
      for (const auto& [key, row] : keys->second)
        order[static_cast<size_t>(row)] = key;
      c.ints[r.names[w] + "/keys"] = std::move(order);
    }
  }
  return c;
}

core::Expected<core::Checkpoint> Model::read_weights() {
  if (auto st = pull(); !st) return st.error();
  auto& r = s_->replica;
  if (s_->strategy != nullptr) {
    core::Checkpoint c;
    for (size_t w = 0; w < r.params.size(); ++w) {
      if (!r.graph->table[w]) {
        c.tensors[r.names[w]] = r.params[w].value->to(core::Device::cpu());
      } else if (!r.graph->keyed[w]) {
        auto rows = s_->strategy->read(s_->variables[w]);
        if (!rows) return rows.error();
        c.tensors[r.names[w]] = std::move(*rows);
      } else {  // a dynamic table: its rows with their keys, a key a row
        auto rows = s_->strategy->read_table(s_->variables[w]);
        if (!rows) return rows.error();
        c.tensors[r.names[w]] = std::move(rows->values);
        c.ints[r.names[w] + "/keys"] = std::move(rows->keys);
      }
    }
    return c;
  }
  return weights();
}

core::Status Model::set_weights(const core::Checkpoint& ckpt) {
  auto& r = s_->replica;
  if (!r.graph) return r.status;
  if (core::keras::is_ctr_program_checkpoint(ckpt)) {
    // Written by ctr_fit before its model was a Keras graph: its variables migrated, once.
    auto config = core::keras::ctr_form_config(r.graph->graph());
    if (!config)
      return make_error(Errc::invalid_argument,
                        "the checkpoint holds the built-in CTR model's variables (bias, table "
                        "'embedding'), and " +
                            config.error().message);
    auto migrated = core::keras::migrate_ctr_checkpoint(*config, ckpt);
    if (!migrated) return migrated.error();
    return set_weights(*migrated);
  }
  // Checked whole first: nothing changes unless every weight fits.
  const auto& ws = r.graph->graph().weights();
  std::vector<std::unordered_map<int64_t, int64_t>> keyed(ws.size());
  for (size_t w = 0; w < ws.size(); ++w) {
    auto it = ckpt.tensors.find(r.names[w]);
    if (it == ckpt.tensors.end())
      return make_error(Errc::invalid_argument,
                        "the checkpoint has no variable '" + r.names[w] + "'");
    const auto& shape = ws[w].weight().shape;
    if (!r.graph->keyed[w]) {
      if (it->second.shape() != shape)
        return make_error(Errc::invalid_argument, "the checkpoint's '" + r.names[w] +
                                                      "' has shape " +
                                                      it->second.shape().to_string() +
                                                      ", the model's is " + shape.to_string());
      continue;
    }
    auto keys = ckpt.ints.find(r.names[w] + "/keys");
    if (it->second.shape().rank() != 2 || it->second.shape()[1] != shape[1] ||
        keys == ckpt.ints.end() ||
        static_cast<int64_t>(keys->second.size()) != it->second.shape()[0])
      return make_error(Errc::invalid_argument, "the checkpoint's dynamic table '" + r.names[w] +
                                                    "' does not have a key per row of width " +
                                                    std::to_string(shape[1]));
    for (size_t i = 0; i < keys->second.size(); ++i)
      if (!keyed[w].emplace(keys->second[i], static_cast<int64_t>(i)).second)
        return make_error(Errc::invalid_argument,
                          "the checkpoint's dynamic table '" + r.names[w] + "' holds a key twice");
  }
  for (size_t w = 0; w < ws.size(); ++w) {
    auto& weight = ws[w].weight();
    const auto& t = ckpt.tensors.at(r.names[w]);
    if (weight.table || weight.value.device() == t.device())
      weight.value = t;
    else
      weight.value.set(t);
    if (r.graph->keyed[w]) r.graph->row_of[w] = std::move(keyed[w]);
  }
  s_->hold_table();  // the tables' optimizer slots, now that they are held
  return {};
}

core::Status Model::status() const {
  return s_->replica.status;
}

const core::graph::Graph& Model::graph() const {
  TROUPE_ASSERT(s_->replica.graph != nullptr, "graph() of a model that could not be made");
  return s_->replica.graph->graph();
}

std::vector<core::FeatureSpec> Model::data_specs() const {
  TROUPE_ASSERT(s_->replica.graph != nullptr, "data_specs() of a model that could not be made");
  return detail::feature_specs(*s_->replica.graph);
}

std::map<std::string, double> Model::logs(const BatchStats& stats,
                                          const std::string& prefix) const {
  TROUPE_ASSERT(s_->replica.graph != nullptr, "logs() of a model that could not be made");
  return detail::graph_logs(*s_->replica.graph, stats, prefix);
}

void Model::set_eval_batches(std::shared_ptr<const std::vector<core::Batch>> batches) {
  std::lock_guard<std::mutex> lock(s_->eval.mu);
  s_->eval.batches = std::move(batches);
}

core::Expected<std::vector<core::Tensor>> Model::predict(const core::Batch& batch) {
  if (auto st = s_->place(); !st) return st.error();
  if (s_->strategy == nullptr) s_->hold_table();  // one process: its tables are here
  if (s_->strategy != nullptr)
    if (auto st = pull(); !st) return st.error();  // trained on the PS tasks
  auto& g = *s_->replica.graph;
  if (auto st = g.forward(batch, /*train=*/false, detail::model_rows(*s_)); !st) return st.error();
  std::vector<core::Tensor> out;
  for (size_t i = 0; i < g.graph().outputs().size(); ++i)
    out.push_back(core::Tensor::from_view(g.graph().output(i)).to(core::Device::cpu()));
  return out;
}

namespace detail {

GraphReplica::RowsFn model_rows(Model::State& s) {
  GraphReplica& g = *s.replica.graph;
  return GraphReplica::each_table([&s, &g](size_t t, const std::vector<int64_t>& ids) {
    if (s.strategy == nullptr) return held_rows(g, t, ids);
    // The batch's rows (by index or key) from the PS tasks: the chief holds no table.
    return s.strategy->read_rows(s.variables[g.tables()[t].weight], ids);
  });
}

}  // namespace detail

core::Expected<BatchStats> Model::evaluate() {
  if (auto st = s_->place(); !st) return st.error();
  if (s_->strategy == nullptr) s_->hold_table();  // one process: its tables are here
  auto& g = s_->replica.graph;
  auto batches = s_->eval.get_batches(s_->spec);
  if (!batches) return batches.error();
  if (auto st = pull(); !st) return st.error();
  BatchStats total;
  for (const auto& batch : **batches) {
    auto stats = g->run(batch, /*train=*/false, detail::model_rows(*s_));
    if (!stats) return stats;
    total.merge(*stats);
  }
  return total;
}

core::Expected<BatchStats> Model::evaluate_distributed() {
  auto coord = coordinator();
  if (!coord) return coord.error();
  // The chief counts the validation batches; workers read their own copy.
  auto b = s_->eval.get_batches(s_->spec);
  if (!b) return b.error();
  const auto batches = static_cast<int64_t>((*b)->size());
  const std::string step = s_->spec.name + "/validate";
  // One closure per batch. A closure whose worker is lost runs again elsewhere and
  // computes the same batch; each RemoteValue resolves once, so each batch counts once.
  std::vector<RemoteValue<BatchStats>> results;
  for (int64_t i = 0; i < batches; ++i)
    results.push_back((*coord)->schedule<BatchStats>(step, i));
  BatchStats total;
  core::Status failed;
  for (auto& r : results) {
    auto stats = r.fetch();
    if (!stats) {
      if (failed.ok()) failed = stats.error();
      continue;
    }
    total.merge(*stats);
  }
  const auto joined = (*coord)->join();
  if (!failed.ok()) return failed.error();
  if (!joined.ok()) return joined.error();
  return total;
}

}  // namespace troupe
