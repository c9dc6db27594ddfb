#include "core/keras/compile_config.hpp"
#include "core/graph/json_guard.hpp"

#include <algorithm>
#include <cctype>
#include <utility>

#include "core/keras/keras_objects.hpp"

namespace troupe::core::keras {

using namespace graph;

using detail::config_error;
using detail::dump_short;
using detail::is_serialized_object;
using detail::KerasArgs;
using detail::Shapes;
using nlohmann::json;

namespace {

// ---- Structure ----

bool is_leaf(const json& j) {
  return j.is_string() || is_serialized_object(j);
}

// Per output, its loss's JSON (null: none), laid out as Keras's CompileLoss.build does;
// `shared` when one loss stands for every output.
Expected<std::vector<json>> losses_per_output(const json& loss,
                                              const std::vector<std::string>& outputs,
                                              bool& shared) {
  const size_t n = outputs.size();
  shared = false;
  if (loss.is_null()) return config_error("'loss' is null: there is nothing to train on");
  if (is_leaf(loss)) {
    shared = true;
    return std::vector<json>(n, loss);
  }
  if (loss.is_array()) {
    if (loss.size() != n)
      return config_error("'loss' has " + std::to_string(loss.size()) + " entries for " +
                          std::to_string(n) + " outputs");
    for (const auto& l : loss)
      if (!l.is_null() && !is_leaf(l))
        return config_error("'loss' entry " + dump_short(l) + " is not one loss");
    return std::vector<json>(loss.begin(), loss.end());
  }
  if (loss.is_object()) {
    std::vector<json> out(n);
    for (auto it = loss.begin(); it != loss.end(); ++it) {
      const auto at = std::find(outputs.begin(), outputs.end(), it.key());
      if (at == outputs.end())
        return config_error("'loss' names '" + it.key() + "', which is not an output of the model");
      if (!it->is_null() && !is_leaf(*it))
        return config_error("'loss' of output '" + it.key() + "' is not one loss");
      out[static_cast<size_t>(at - outputs.begin())] = *it;
    }
    return out;
  }
  return config_error("'loss' = " + dump_short(loss) + " is not a loss, a list or a dict");
}

// Per output, its loss weight (1 where none is given), as CompileLoss.build packs them.
Expected<std::vector<float>> weights_per_output(const json& w,
                                                const std::vector<std::string>& outputs,
                                                bool shared) {
  const size_t n = outputs.size();
  std::vector<float> out(n, 1.0f);
  auto number = [](const json& v, float& into) {
    if (v.is_null()) return true;
    if (!v.is_number()) return false;
    into = to_float(v.get<double>());
    return true;
  };
  if (w.is_null()) return out;
  if (w.is_number() || (w.is_array() && w.size() == 1 && (shared || n == 1))) {
    if (!shared && n != 1)
      return config_error("'loss_weights' is one number for a model of " + std::to_string(n) +
                          " outputs with a loss each");
    float v = 1.0f;
    if (!number(w.is_array() ? w[0] : w, v)) return config_error("'loss_weights' must be numbers");
    std::fill(out.begin(), out.end(), v);
    return out;
  }
  if (w.is_array()) {
    if (shared || w.size() != n)
      return config_error("'loss_weights' has " + std::to_string(w.size()) + " entries for " +
                          (shared ? std::string("one loss") : std::to_string(n) + " losses"));
    for (size_t i = 0; i < n; ++i)
      if (!number(w[i], out[i])) return config_error("'loss_weights' must be numbers");
    return out;
  }
  if (w.is_object()) {
    for (auto it = w.begin(); it != w.end(); ++it) {
      const auto at = std::find(outputs.begin(), outputs.end(), it.key());
      if (at == outputs.end())
        return config_error("'loss_weights' names '" + it.key() +
                            "', which is not an output of the model");
      if (!number(*it, out[static_cast<size_t>(at - outputs.begin())]))
        return config_error("'loss_weights' of output '" + it.key() + "' must be a number");
    }
    return out;
  }
  return config_error("'loss_weights' = " + dump_short(w) + " is not a number, list or dict");
}

// Every leaf of a metrics structure, in order (tree.flatten: dicts by sorted key).
Status flatten_metrics(const json& j, std::vector<json>& into) {
  if (is_leaf(j) || j.is_null()) {
    into.push_back(j);
  } else if (j.is_array() || j.is_object()) {
    for (const auto& e : j)  // nlohmann's objects iterate in sorted key order
      if (auto st = flatten_metrics(e, into); !st) return st;
  } else {
    return config_error("metric " + dump_short(j) + " is not a metric's name or object");
  }
  return {};
}

// Per output, its metrics' JSON, laid out as CompileMetrics._build_metrics_set does.
Expected<std::vector<std::vector<json>>> metrics_per_output(const json& m,
                                                            const std::vector<std::string>& outputs,
                                                            const std::string& key) {
  const size_t n = outputs.size();
  std::vector<std::vector<json>> out(n);
  if (m.is_null() || (m.is_array() && m.empty()) || (m.is_object() && m.empty())) return out;
  if (!m.is_array() && !m.is_object())
    return config_error("'" + key + "' must be a list or a dict, got " + dump_short(m));
  if (n == 1) {  // one output: every metric is its own, whatever the nesting
    if (auto st = flatten_metrics(m, out[0]); !st) return st.error();
    return out;
  }
  auto entry = [&](const json& e, std::vector<json>& into) -> Status {
    if (e.is_null()) return {};
    if (is_leaf(e)) {
      into.push_back(e);
      return {};
    }
    return flatten_metrics(e, into);
  };
  if (m.is_array() && m.size() == n) {
    for (size_t i = 0; i < n; ++i)
      if (auto st = entry(m[i], out[i]); !st) return st.error();
    return out;
  }
  if (m.is_object() && !is_serialized_object(m)) {
    for (auto it = m.begin(); it != m.end(); ++it) {
      const auto at = std::find(outputs.begin(), outputs.end(), it.key());
      if (at == outputs.end())
        return config_error("'" + key + "' names '" + it.key() +
                            "', which is not an output of the model");
      if (auto st = entry(*it, out[static_cast<size_t>(at - outputs.begin())]); !st)
        return st.error();
    }
    return out;
  }
  return config_error("'" + key + "' of a model with " + std::to_string(n) +
                      " outputs must be a list with one entry per output or a dict by output "
                      "name, got " +
                      dump_short(m));
}

}  // namespace

namespace {

Expected<CompileConfig> parse_compile_unguarded(const json& config, const Graph& graph,
                                                const CompileOptions& options) {
  if (!config.is_object()) return config_error("is not an object");
  CompileConfig cc;
  KerasArgs top("the model", config);
  for (const char* key : {"run_eagerly", "jit_compile"})
    top.ignore(key);  // how Keras runs a step, not what it computes
  if (auto st = top.allow("auto_scale_loss", {true, false}); !st) return st.error();
  auto spe = top.integer("steps_per_execution", 1);
  if (!spe) return spe.error();
  if (*spe < 1) return top.error("steps_per_execution", "must be at least 1");
  cc.steps_per_execution = *spe;
  const json* opt = top.get("optimizer");
  if (opt == nullptr) return config_error("'optimizer' is missing");
  auto oc = parse_keras_optimizer(*opt, &cc.loss_scale);
  if (!oc) return oc.error();
  cc.optimizer = *oc;

  std::vector<std::string> names;
  for (const auto& o : graph.outputs())
    names.push_back(o.name);
  const size_t n = names.size();
  static const json null;
  auto value = [&](const char* key) -> const json& {
    const json* v = top.get(key);
    return v == nullptr ? null : *v;
  };
  bool shared = false;
  auto losses = losses_per_output(value("loss"), names, shared);
  if (!losses) return losses.error();
  auto weights = weights_per_output(value("loss_weights"), names, shared);
  if (!weights) return weights.error();
  auto metrics = metrics_per_output(value("metrics"), names, "metrics");
  if (!metrics) return metrics.error();
  auto weighted = metrics_per_output(value("weighted_metrics"), names, "weighted_metrics");
  if (!weighted) return weighted.error();
  if (auto st = top.finish(); !st) return st.error();

  std::vector<Shapes> shapes(n);
  size_t with_loss = 0;
  for (size_t i = 0; i < n; ++i) {
    const auto& spec = graph.outputs()[i].spec;
    shapes[i].pred = spec.shape;
    shapes[i].label = spec.shape;
    OutputCompile o;
    o.output = names[i];
    o.loss_weight = (*weights)[i];
    auto known = options.label_shapes.find(names[i]);
    if (known != options.label_shapes.end()) shapes[i].label = known->second;
    if (!(*losses)[i].is_null()) {
      auto loss = detail::parse_loss((*losses)[i], shapes[i], names[i]);
      if (!loss) return loss.error();
      const bool per_row = loss->kind != LossKind::binary_crossentropy &&
                           loss->kind != LossKind::binary_crossentropy_logits &&
                           loss->kind != LossKind::mean_squared_error;
      if (per_row && spec.shape.empty())
        return config_error("loss '" + loss->name + "' of output '" + names[i] +
                            "': predictions of " + spec.to_string() +
                            " per example have no class axis");
      if (known == options.label_shapes.end() && loss_takes_classes(loss->kind))
        shapes[i].label.pop_back();
      o.loss = *loss;
      ++with_loss;
    }
    cc.outputs.push_back(std::move(o));
  }
  if (with_loss == 0) return config_error("no output has a loss: there is nothing to train on");
  if (with_loss > 1)
    for (auto& o : cc.outputs)
      if (o.loss) o.loss_name = o.output + "_loss";

  // History names as CompileMetrics.result() makes them unique: metrics first, then
  // weighted metrics, output by output.
  std::map<std::string, int> seen;
  for (int pass = 0; pass < 2; ++pass) {
    const auto& lists = pass == 0 ? *metrics : *weighted;
    for (size_t i = 0; i < n; ++i)
      for (const auto& j : lists[i]) {
        auto m = detail::parse_metric(j, shapes[i], names[i]);
        if (!m) return m.error();
        m->output = i;
        m->weighted = pass == 1;
        const std::string prefix = n > 1 ? names[i] + "_" : "";
        std::string name = prefix + m->name;
        if (seen.count(name) == 0) {
          seen[name] = 1;
        } else if (pass == 0) {
          name += "_" + std::to_string(seen[name]++);
        } else {
          name = prefix + "weighted_" + m->name;
          if (seen.count(name) == 0)
            seen[name] = 1;
          else
            name += "_" + std::to_string(seen[name]++);
        }
        m->name = name;
        cc.metrics.push_back(std::move(*m));
      }
  }
  return cc;
}

}  // namespace

Expected<CompileConfig> parse_compile_config(const json& config, const Graph& graph,
                                             const CompileOptions& options) {
  return guard_json("compile_config",
                    [&] { return parse_compile_unguarded(config, graph, options); });
}

}  // namespace troupe::core::keras
