#include "api/graph_replica.hpp"
#include "core/json_limits.hpp"
#include "core/keras/compile_config.hpp"
#include "troupe/devices.hpp"

#include <cmath>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/sha256.hpp"

namespace troupe {

using core::Errc;
using core::make_error;

core::Expected<std::shared_ptr<const KerasSource>> read_keras_source(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(Errc::not_found, "model file '" + path + "' cannot be opened");
  std::ostringstream buf;
  buf << in.rdbuf();
  if (in.bad()) return make_error(Errc::io_error, "model file '" + path + "': read failed");
  return keras_source(path, buf.str());
}

std::shared_ptr<const KerasSource> keras_source(std::string name, std::string bytes) {
  auto s = std::make_shared<KerasSource>();
  s->name = std::move(name);
  s->bytes = std::move(bytes);
  const auto digest = core::sha256(s->bytes);
  static const char* hex = "0123456789abcdef";
  for (uint8_t b : digest) {
    s->sha256.push_back(hex[b >> 4]);
    s->sha256.push_back(hex[b & 15]);
  }
  return s;
}

core::Expected<std::vector<core::FeatureSpec>> keras_feature_specs(const KerasSource& source,
                                                                   const KerasOptions& options) {
  auto r = detail::GraphReplica::make(source, options);
  if (!r) return r.error();
  return detail::feature_specs(**r);
}

namespace detail {

namespace {

// Each output's label column: the option's, else "label" for one output, else the output's
// own name.
core::Status set_labels(core::graph::Objective& o, const core::graph::Graph& g,
                        const KerasOptions& options) {
  for (const auto& [output, column] : options.labels) {
    bool found = false;
    for (const auto& out : g.outputs())
      found = found || out.name == output;
    if (!found)
      return make_error(Errc::invalid_argument,
                        "--label names output '" + output + "', which the model does not have");
    if (auto st = o.set_label_column(output, column); !st) return st;
  }
  return {};
}

}  // namespace

core::Status GraphReplica::place(const std::string& device_name, const std::string& precision) {
  auto d = select_device(device_name);
  if (!d) return d.error();
  auto p = select_precision(precision, *d);
  if (!p) return p.error();
  if (auto st = graph().to(*d, *p); !st) return st;
  device = *d;
  if (core::needs_loss_scale(*p))
    loss_scale.emplace();
  else
    loss_scale.reset();
  return {};
}

bool GraphReplica::finish_scaled_step() {
  if (!loss_scale) return true;
  std::vector<core::TensorView> grads;
  for (size_t w : dense)
    if (trains[w]) grads.push_back(graph().gradient(w));
  for (auto& t : tables())
    grads.push_back(t.row_grads);
  auto backend = core::backend_for(device);
  return backend && core::unscale_gradients(*loss_scale, **backend, grads);
}

core::Expected<std::unique_ptr<GraphReplica>> GraphReplica::make(const KerasSource& source,
                                                                 const KerasOptions& options,
                                                                 bool worker_copy) {
  auto loaded = core::keras::load_model_bytes(source.bytes, source.name, worker_copy);
  if (!loaded) return loaded.error();
  auto r = std::make_unique<GraphReplica>();
  r->loaded = std::move(*loaded);
  r->seed = options.seed;
  auto& g = r->graph();
  nlohmann::json compile = r->loaded.compile_config;
  if (!options.compile_json.empty()) {
    auto given = core::parse_json_bounded(options.compile_json, "the compile settings given");
    if (!given) return given.error();
    compile = std::move(*given);
    if (options.save_compile) {  // what a saved file carries, as after Keras's compile()
      r->loaded.compile_config = compile;
      r->loaded.config["compile_config"] = compile;
    }
  }
  if (compile.is_null() || (compile.is_object() && compile.empty()))  // Keras 3 writes {}
    return make_error(Errc::invalid_argument,
                      source.name +
                          ": the model was saved without compile(): no loss to train "
                          "(compile it in Keras before saving, or give --compile)");
  auto cc = core::keras::parse_compile_config(compile, g);
  if (!cc) return make_error(cc.error().code, source.name + ": " + cc.error().message);
  r->objective = std::make_unique<core::graph::Objective>(std::move(*cc), g);
  if (auto st = set_labels(*r->objective, g, options); !st) return st.error();
  for (const auto& [layer, spec] : options.dynamic_tables) {
    auto* l = g.operation(layer);
    bool has_table = false;
    if (l != nullptr)
      for (auto& w : l->weights())
        if (w.table) {
          w.keyed = true;
          has_table = true;
        }
    if (!has_table)
      return make_error(Errc::invalid_argument,
                        "dynamic table '" + layer + "': the model has no Embedding of that name");
  }
  const auto& ws = g.weights();
  r->before.resize(ws.size());
  r->host.resize(ws.size());
  for (size_t i = 0; i < ws.size(); ++i) {
    const auto& w = ws[i];
    r->names.push_back(w.path);
    r->table.push_back(w.weight().table);
    r->keyed.push_back(w.weight().keyed);
    r->trains.push_back(g.trains(w));
    if (w.weight().table) {
      r->table_names.push_back(w.path);
    } else {
      r->dense.push_back(i);
      r->dense_names.push_back(w.path);
    }
  }
  return r;
}

int GraphReplica::table_of(size_t w) const {
  if (!table[w]) return -1;
  int t = 0;
  for (size_t i = 0; i < w; ++i)
    if (table[i]) ++t;
  return t;
}

core::Status GraphReplica::forward(const core::Batch& batch, bool train, const RowsFn& rows) {
  auto& g = graph();
  if (auto st = g.feed(batch); !st) return st;
  auto& uses = g.tables();
  if (!uses.empty()) {
    auto got = rows(uses);
    if (!got) return got.error();
    if (got->size() != uses.size())
      return make_error(Errc::internal, "rows of " + std::to_string(got->size()) + " tables for " +
                                            std::to_string(uses.size()));
    for (size_t t = 0; t < uses.size(); ++t)
      uses[t].rows = std::move((*got)[t]);
  }
  const auto& ws = g.weights();
  if (train)
    for (size_t w = 0; w < ws.size(); ++w)
      if (!table[w] && !trains[w]) before[w] = ws[w].weight().value.to(core::Device::cpu());
  return g.forward(train, seed + steps++);
}

core::Expected<BatchStats> GraphReplica::run(const core::Batch& batch, bool train,
                                             const RowsFn& rows, float loss_scale,
                                             const std::function<void(size_t)>& weight_done) {
  if (auto st = forward(batch, train, rows); !st) return st.error();
  auto& g = graph();
  objective->reset_states();  // this batch's states alone: the caller merges them
  auto loss = train ? objective->train_step(g, batch, loss_scale, weight_done)
                    : objective->test_step(g, batch);
  if (!loss) return loss.error();
  if (!std::isfinite(*loss))
    return make_error(Errc::invalid_argument, "loss is not finite (" + std::to_string(*loss) + ")");
  const int64_t n = g.batch_size();
  BatchStats stats{*loss * static_cast<double>(n), n, 1};
  stats.metrics = objective->states();
  return stats;
}

core::ConstTensorView GraphReplica::change(size_t w) {
  core::Tensor now = graph().weights()[w].weight().value.to(core::Device::cpu());
  host[w] = before[w];
  host[w].matrix() -= now.matrix();
  return host[w];
}

core::ConstTensorView GraphReplica::host_gradient(size_t w) {
  const int t = table_of(w);
  const core::Tensor& g = t >= 0 ? tables()[static_cast<size_t>(t)].row_grads : graph().gradient(w);
  return core::on(core::Device::cpu(), g, host[w]);
}

GraphReplica::RowsFn GraphReplica::each_table(
    std::function<core::Expected<core::Tensor>(size_t t, const std::vector<int64_t>& ids)> rows) {
  return [rows = std::move(rows)](const std::vector<core::graph::TableUse>& tables)
             -> core::Expected<std::vector<core::Tensor>> {
    std::vector<core::Tensor> out;
    for (size_t t = 0; t < tables.size(); ++t) {
      auto got = rows(t, tables[t].ids);
      if (!got) return got.error();
      out.push_back(std::move(*got));
    }
    return out;
  };
}

GraphReplica::RowsFn held_tables(GraphReplica& g) {
  return GraphReplica::each_table(
      [&g](size_t t, const std::vector<int64_t>& ids) { return held_rows(g, t, ids); });
}

core::Expected<core::Tensor> held_rows(GraphReplica& g, size_t t, const std::vector<int64_t>& ids) {
  const size_t w = g.tables()[t].weight;
  const auto& weight = g.graph().weights()[w].weight();
  const core::Tensor& table = weight.value;
  const int64_t width = weight.shape[weight.shape.rank() - 1];
  if (table.shape().rank() != 2 || table.shape()[1] != width)
    return make_error(Errc::internal, "table '" + g.names[w] + "' is not held in this process");
  const auto keys = g.row_of.find(w);
  core::Tensor rows(core::Shape{static_cast<int64_t>(ids.size()), width});
  for (size_t i = 0; i < ids.size(); ++i) {
    int64_t row = ids[i];
    if (keys != g.row_of.end()) {  // a dynamic table: a key without a row reads as zeros
      auto it = keys->second.find(ids[i]);
      row = it == keys->second.end() ? -1 : it->second;
    } else if (weight.keyed) {
      return make_error(Errc::invalid_argument,
                        "table '" + g.names[w] + "' is a dynamic table: it lives on PS tasks");
    }
    float* to = rows.data() + static_cast<int64_t>(i) * width;
    if (row < 0 || row >= table.shape()[0])
      std::fill_n(to, width, 0.0f);
    else
      std::copy_n(table.data() + row * width, width, to);
  }
  return rows;
}

std::vector<core::FeatureSpec> feature_specs(const GraphReplica& r) {
  std::vector<core::FeatureSpec> out;
  auto add = [&](core::FeatureSpec s) {
    for (const auto& o : out)
      if (o.name == s.name) return;
    out.push_back(std::move(s));
  };
  auto& g = *r.loaded.model.graph;
  for (const auto& in : g.inputs())
    add({in.name, in.spec.kind, in.spec.shape});
  const auto& cc = r.objective->config();
  for (size_t i = 0; i < g.outputs().size(); ++i) {
    const auto& out = g.outputs()[i];
    const bool classes = cc.outputs[i].loss && core::loss_takes_classes(cc.outputs[i].loss->kind);
    core::FeatureSpec s{r.objective->label_column(i), core::ColumnKind::floats, out.spec.shape};
    if (classes) {
      s.kind = core::ColumnKind::ints;
      s.shape.pop_back();  // a class index per row of predictions
    }
    if (s.per_example() == 1) s.shape.clear();
    add(std::move(s));
  }
  return out;
}

Logs graph_logs(const GraphReplica& r, const BatchStats& stats, const std::string& prefix) {
  Logs logs;
  const auto& names = r.objective->names();
  for (size_t i = 0; i < names.size() && i < stats.metrics.values.size(); ++i)
    logs[prefix + names[i]] = stats.metrics.values[i].result();
  if (logs.find(prefix + "loss") == logs.end()) logs[prefix + "loss"] = stats.loss();
  return logs;
}

}  // namespace detail
}  // namespace troupe
