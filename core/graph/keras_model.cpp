#include "core/graph/keras_model.hpp"
#include "core/graph/json_guard.hpp"

#include <cctype>
#include <set>

#include <nlohmann/json.hpp>

#include "core/layers/layers.hpp"

namespace troupe::core::graph {

using nlohmann::json;

namespace {

// A reference to a layer call's output: (layer, node index, tensor index).
struct History {
  std::string layer;
  int64_t node = 0;
  int64_t tensor = 0;
};

Error model_error(const std::string& what) {
  return make_error(Errc::invalid_argument, "model config: " + what);
}

// Layers that read integer ids: a float Input feeding them is taken as ids (Keras casts).
bool reads_ids(const std::string& class_name) {
  static const std::set<std::string> ids = {"Embedding", "IntegerLookup", "Hashing"};
  return ids.count(class_name) > 0;
}

Expected<History> parse_history(const json& h) {
  if (!h.is_array() || h.size() < 3 || !h[0].is_string() || !h[1].is_number_integer() ||
      !h[2].is_number_integer())
    return model_error("a tensor reference must be [layer, node, tensor], got " + h.dump());
  return History{h[0].get<std::string>(), h[1].get<int64_t>(), h[2].get<int64_t>()};
}

// The tensors a Keras 3 node's "args" reference, in order (nested lists flattened).
Status collect_keras3(const json& v, std::vector<History>& out) {
  if (v.is_array()) {
    for (const auto& e : v)
      if (auto st = collect_keras3(e, out); !st) return st;
    return {};
  }
  if (v.is_object() && v.value("class_name", "") == "__keras_tensor__") {
    auto h = parse_history(member(member(v, "config"), "keras_history"));
    if (!h) return h.error();
    out.push_back(*h);
    return {};
  }
  if (v.is_object() && v.contains("class_name"))
    return model_error("a call argument of class '" + v.value("class_name", "") +
                       "' is not supported (only tensors)");
  return {};  // a plain value (None, a number): no tensor
}

// One node's input tensors, in Keras 3's form ({"args": [...], "kwargs": {...}}) or tf_keras
// 2's ([[layer, node, tensor, kwargs], ...]).
Expected<std::vector<History>> node_inputs(const std::string& layer, const json& node) {
  std::vector<History> out;
  if (node.is_object()) {
    if (auto st = collect_keras3(node.value("args", json::array()), out); !st) return st.error();
    const json kwargs = node.value("kwargs", json::object());  // items() of a named value
    for (const auto& [k, v] : kwargs.items()) {
      if (v.is_null() || (k == "training" && v.is_boolean())) continue;
      return model_error("layer '" + layer + "' is called with argument '" + k +
                         "', which Troupe does not support");
    }
    return out;
  }
  if (!node.is_array()) return model_error("layer '" + layer + "' has a malformed inbound node");
  for (const auto& ref : node) {
    auto h = parse_history(ref);
    if (!h) return h.error();
    if (ref.size() > 3 && ref[3].is_object())
      for (const auto& [k, v] : ref[3].items())
        if (!v.is_null() && k != "training")
          return model_error("layer '" + layer + "' is called with argument '" + k +
                             "', which Troupe does not support");
    out.push_back(*h);
  }
  return out;
}

// "input_layers" / "output_layers": [[name, node, tensor], ...], one triple, or a dict.
Expected<std::vector<History>> endpoints(const json& v, const char* what) {
  std::vector<History> out;
  if (v.is_array() && v.size() == 3 && v[0].is_string()) {
    auto h = parse_history(v);
    if (!h) return h.error();
    return std::vector<History>{*h};
  }
  if (v.is_object()) {
    for (const auto& [k, e] : v.items()) {
      auto h = parse_history(e);
      if (!h) return h.error();
      out.push_back(*h);
    }
    return out;
  }
  if (!v.is_array()) return model_error(std::string("'") + what + "' is malformed");
  for (const auto& e : v) {
    auto h = parse_history(e);
    if (!h) return h.error();
    out.push_back(*h);
  }
  return out;
}

// An InputLayer's (or a Sequential first layer's) spec from batch_shape/batch_input_shape.
Expected<TensorSpec> input_spec(const std::string& name, const json& config) {
  const json* shape = nullptr;
  for (const char* k : {"batch_shape", "batch_input_shape"})
    if (config.contains(k) && !config[k].is_null()) shape = &config[k];
  if (shape == nullptr && config.contains("shape") && config["shape"].is_array()) {
    TensorSpec s;
    for (const auto& d : config["shape"]) {
      if (!d.is_number_integer())
        return model_error("input '" + name + "' has an unknown dimension in " +
                           config["shape"].dump() + ": Troupe needs fixed shapes");
      s.shape.push_back(d.get<int64_t>());
    }
    shape = nullptr;
    return s;
  }
  if (shape == nullptr || !shape->is_array() || shape->empty())
    return model_error("input '" + name + "' has no shape");
  TensorSpec s;
  for (size_t i = 1; i < shape->size(); ++i) {
    const auto& d = (*shape)[i];
    if (!d.is_number_integer() || d.get<int64_t>() < 0)
      return model_error("input '" + name + "' has an unknown dimension in " + shape->dump() +
                         ": Troupe needs fixed shapes (pad variable-length features)");
    s.shape.push_back(d.get<int64_t>());
  }
  std::string dtype = "float32";
  if (config.contains("dtype") && config["dtype"].is_string()) dtype = config["dtype"];
  if (dtype == "float32" || dtype == "float16" || dtype == "bfloat16" || dtype == "float64")
    s.kind = ColumnKind::floats;
  else if (dtype == "int32" || dtype == "int64" || dtype == "uint8" || dtype == "int16")
    s.kind = ColumnKind::ints;
  else if (dtype == "string")
    s.kind = ColumnKind::strings;
  else
    return model_error("input '" + name + "' has dtype '" + dtype +
                       "', which Troupe does not read");
  if (config.contains("sparse") && config["sparse"].is_boolean() && config["sparse"].get<bool>())
    return model_error("input '" + name + "' is sparse, which Troupe does not support");
  if (config.contains("ragged") && config["ragged"].is_boolean() && config["ragged"].get<bool>())
    return model_error("input '" + name + "' is ragged, which Troupe does not support");
  return s;
}

// Keras's naming.to_snake_case: "BatchNormalization" -> "batch_normalization",
// "Conv2D" -> "conv2d", "GlobalAveragePooling1D" -> "global_average_pooling1d".
std::string snake_case(const std::string& in) {
  std::string name;
  for (char ch : in)  // \W+ removed
    if (std::isalnum(static_cast<unsigned char>(ch)) || ch == '_') name.push_back(ch);
  auto upper = [](char ch) { return ch >= 'A' && ch <= 'Z'; };
  auto lower = [](char ch) { return ch >= 'a' && ch <= 'z'; };
  // (.)([A-Z][a-z]+) -> \1_\2: a separator before every capital that starts a lowercase run
  // (not at the start). Python's matches do not overlap, so one it skips is a capital after
  // a lowercase letter, which the next rule separates anyway: the result is the same.
  std::string a;
  for (size_t i = 0; i < name.size(); ++i) {
    if (i > 0 && upper(name[i]) && i + 1 < name.size() && lower(name[i + 1])) a.push_back('_');
    a.push_back(name[i]);
  }
  // ([a-z])([A-Z]) -> \1_\2, then lowercase.
  std::string b;
  for (size_t i = 0; i < a.size(); ++i) {
    b.push_back(a[i]);
    if (lower(a[i]) && i + 1 < a.size() && upper(a[i + 1])) b.push_back('_');
  }
  for (auto& ch : b)
    ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return b;
}

// Keras's _get_unique_name: "dense", then "dense_1", "dense_2", ...
std::string unique_name(const std::string& base, std::map<std::string, int>& used) {
  auto it = used.find(base);
  if (it == used.end()) {
    used[base] = 0;
    return base;
  }
  return base + "_" + std::to_string(++it->second);
}

bool is_model_class(const std::string& c) {
  return c == "Functional" || c == "Sequential" || c == "Model";
}

class Builder {
 public:
  Builder(KerasModel& m, const std::map<std::string, std::string>* assets)
      : m_(m), assets_(assets) {}

  Status sequential(const json& config) {
    const json& layers = config.value("layers", json::array());
    if (!layers.is_array() || layers.empty())
      return model_error("a Sequential model without layers");
    size_t first = 0;
    int x = -1;
    const json& l0 = layers[0];
    if (l0.value("class_name", "") == "InputLayer") {
      const json& c = l0.value("config", json::object());
      const std::string name = c.value("name", "input_layer");
      auto spec = input_spec(name, c);
      if (!spec) return spec.error();
      if (layers.size() > 1 && reads_ids(layers[1].value("class_name", "")) &&
          spec->kind == ColumnKind::floats)
        spec->kind = ColumnKind::ints;  // Keras casts a float input to ids there
      x = m_.graph->add_input(name, *spec);
      first = 1;
    } else {
      // No InputLayer: the shape comes from the first layer or the model's build shape.
      json shape_src = l0.value("config", json::object());
      if (!shape_src.contains("batch_input_shape") && !shape_src.contains("batch_shape")) {
        if (config.contains("build_input_shape") && !config["build_input_shape"].is_null())
          shape_src = json{{"batch_shape", config["build_input_shape"]}};
        else if (l0.contains("build_config") && l0["build_config"].contains("input_shape"))
          shape_src = json{{"batch_shape", l0["build_config"]["input_shape"]}};
      }
      if (reads_ids(l0.value("class_name", "")) && !shape_src.contains("dtype"))
        shape_src["dtype"] = "int64";
      auto spec = input_spec("input_layer", shape_src);
      if (!spec) return spec.error();
      x = m_.graph->add_input("input_layer", *spec);
    }
    std::string last;
    for (size_t i = first; i < layers.size(); ++i) {
      auto layer = make(layers[i]);
      if (!layer) return layer.error();
      last = (*layer)->name();
      auto out = m_.graph->call(std::move(*layer), {x});
      if (!out) return out.error();
      if (out->size() != 1)
        return model_error("layer '" + last + "' in a Sequential model has several outputs");
      x = (*out)[0];
    }
    if (last.empty()) return model_error("a Sequential model with only an InputLayer");
    return m_.graph->set_outputs({x}, {last});
  }

  Status functional(const json& config) {
    const json& layers = config.value("layers", json::array());
    if (!layers.is_array() || layers.empty())
      return model_error("a Functional model without layers");
    // Inputs first: every InputLayer, typed as its consumers read it.
    std::set<std::string> id_inputs;
    for (const auto& l : layers)
      if (reads_ids(l.value("class_name", "")))
        for (const auto& node : l.value("inbound_nodes", json::array())) {
          auto ins = node_inputs(l.value("name", ""), node);
          if (ins)
            for (const auto& h : *ins)
              id_inputs.insert(h.layer);
        }
    for (const auto& l : layers) {
      if (l.value("class_name", "") != "InputLayer") continue;
      const json& c = l.value("config", json::object());
      const std::string name = l.value("name", c.value("name", ""));
      auto spec = input_spec(name, c);
      if (!spec) return spec.error();
      if (spec->kind == ColumnKind::floats && id_inputs.count(name) > 0)
        spec->kind = ColumnKind::ints;
      tensors_[{name, 0}] = {m_.graph->add_input(name, *spec)};
    }
    // Then every call, in order, deferring those whose inputs are not made yet.
    struct Pending {
      const json* layer;
      size_t node;
    };
    std::vector<Pending> pending;
    for (const auto& l : layers) {
      if (l.value("class_name", "") == "InputLayer") continue;
      const auto nodes = l.value("inbound_nodes", json::array());
      for (size_t k = 0; k < nodes.size(); ++k)
        pending.push_back({&l, k});
    }
    while (!pending.empty()) {
      std::vector<Pending> later;
      for (const auto& p : pending) {
        const std::string name =
            p.layer->value("name", p.layer->value("config", json::object()).value("name", ""));
        auto ins = node_inputs(name, member(*p.layer, "inbound_nodes")[p.node]);
        if (!ins) return ins.error();
        std::vector<int> ids;
        bool ready = true;
        for (const auto& h : *ins) {
          auto it = tensors_.find({h.layer, h.node});
          if (it == tensors_.end()) {
            ready = false;
            break;
          }
          if (h.tensor < 0 || h.tensor >= static_cast<int64_t>(it->second.size()))
            return model_error("layer '" + name + "' reads output " + std::to_string(h.tensor) +
                               " of '" + h.layer + "', which has " +
                               std::to_string(it->second.size()));
          ids.push_back(it->second[static_cast<size_t>(h.tensor)]);
        }
        if (!ready) {
          later.push_back(p);
          continue;
        }
        auto layer = layer_named(*p.layer, name);
        if (!layer) return layer.error();
        auto out = m_.graph->call(*layer, ids);
        if (!out) return out.error();
        tensors_[{name, static_cast<int64_t>(p.node)}] = *out;
      }
      if (later.size() == pending.size()) {
        const std::string name = later[0].layer->value("name", "");
        return model_error("layer '" + name + "' reads a tensor no layer of the model makes");
      }
      pending = std::move(later);
    }
    auto outs = endpoints(config.value("output_layers", json::array()), "output_layers");
    if (!outs) return outs.error();
    std::vector<int> ids;
    std::vector<std::string> names;
    for (const auto& h : *outs) {
      auto it = tensors_.find({h.layer, h.node});
      if (it == tensors_.end() || h.tensor >= static_cast<int64_t>(it->second.size()))
        return model_error("output '" + h.layer + "' is not made by the model");
      ids.push_back(it->second[static_cast<size_t>(h.tensor)]);
      names.push_back(h.layer);
    }
    auto ins = endpoints(config.value("input_layers", json::array()), "input_layers");
    if (!ins) return ins.error();
    for (const auto& h : *ins)
      if (tensors_.count({h.layer, 0}) == 0)
        return model_error("input '" + h.layer + "' has no InputLayer");
    return m_.graph->set_outputs(ids, std::move(names));
  }

 private:
  Expected<std::unique_ptr<Layer>> make(const json& l) {
    const std::string cls = l.value("class_name", "");
    const json& c = l.value("config", json::object());
    if (is_model_class(cls))
      return make_error(Errc::invalid_argument,
                        "layer '" + c.value("name", std::string()) + "' (" + cls +
                            "): a model nested in a model is not supported by Troupe yet; "
                            "flatten it into one Functional model");
    std::string registered = cls;
    if (l.contains("registered_name") && l["registered_name"].is_string())
      registered = l["registered_name"].get<std::string>();
    const std::string name = c.value("name", std::string());
    auto path = paths_.find(name);
    // An adapted lookup layer keeps its vocabulary among the file's assets, at its place.
    json config = c;
    if ((cls == "StringLookup" || cls == "IntegerLookup") &&
        config.value("vocabulary", json()).is_null() && path != paths_.end())
      config["vocabulary"] = path->second + "/vocabulary.txt";
    auto layer = make_layer(registered, config, assets_);
    if (!layer) return layer;
    if (path != paths_.end()) m_.weights_path[(*layer)->name()] = path->second;
    return layer;
  }

  // The layer of that name, made on its first call and shared by later ones.
  Expected<std::shared_ptr<Layer>> layer_named(const json& l, const std::string& name) {
    auto it = made_.find(name);
    if (it != made_.end()) return it->second;
    auto layer = make(l);
    if (!layer) return layer.error();
    std::shared_ptr<Layer> shared = std::move(*layer);
    made_[name] = shared;
    return shared;
  }

  // Where Keras saves each layer's variables: "layers/<snake_case(class)>[_k]" in the
  // order of model.layers (a Sequential's InputLayer is not among them).
  void name_paths(const json& layers, bool skip_input_layers) {
    std::map<std::string, int> used;
    for (const auto& l : layers) {
      const std::string cls = l.value("class_name", "");
      if (skip_input_layers && cls == "InputLayer") continue;
      const std::string name = l.value("name", l.value("config", json::object()).value("name", ""));
      paths_[name] = "layers/" + unique_name(snake_case(cls), used);
    }
  }

 public:
  void paths_for(const json& layers, bool sequential,
                 const std::map<std::string, std::string>* groups) {
    name_paths(layers, sequential);
    if (groups == nullptr) return;
    // A file says where it keeps each layer: the group whose "name" attribute is the
    // layer's (Keras numbers groups by class in its own order; the names say which is which).
    const std::string tail = "/vars";
    for (const auto& [group, layer] : *groups) {
      if (group.rfind("layers/", 0) != 0 || group.size() <= tail.size() ||
          group.compare(group.size() - tail.size(), tail.size(), tail) != 0)
        continue;
      const std::string path = group.substr(0, group.size() - tail.size());
      if (path.find('/', 7) != std::string::npos) continue;  // a nested object's
      if (paths_.count(layer) > 0) paths_[layer] = path;
    }
  }

 private:
  KerasModel& m_;
  const std::map<std::string, std::string>* assets_;
  std::map<std::string, std::string> paths_;
  std::map<std::pair<std::string, int64_t>, std::vector<int>> tensors_;
  std::map<std::string, std::shared_ptr<Layer>> made_;
};

}  // namespace

namespace {

Expected<KerasModel> build_unguarded(const json& model,
                                     const std::map<std::string, std::string>* assets,
                                     const std::map<std::string, std::string>* groups) {
  if (!model.is_object() || !model.contains("class_name") || !model.contains("config"))
    return model_error("not a Keras model description (no class_name and config)");
  KerasModel m;
  m.class_name = model.value("class_name", "");
  const json& config = model["config"];
  m.name = config.value("name", m.class_name);
  m.graph = std::make_unique<Graph>();
  Builder b(m, assets);
  Status st;
  if (m.class_name == "Sequential") {
    b.paths_for(config.value("layers", json::array()), /*sequential=*/true, groups);
    st = b.sequential(config);
  } else if (m.class_name == "Functional" || m.class_name == "Model") {
    b.paths_for(config.value("layers", json::array()), /*sequential=*/false, groups);
    st = b.functional(config);
  } else
    return model_error("model class '" + m.class_name +
                       "' is not supported (Troupe reads Sequential and Functional models; a "
                       "subclassed model has no graph to read)");
  if (!st) return st.error();
  return m;
}

}  // namespace

Expected<KerasModel> build_keras_model(const json& model,
                                       const std::map<std::string, std::string>* assets,
                                       const std::map<std::string, std::string>* groups) {
  return guard_json("model config", [&] { return build_unguarded(model, assets, groups); });
}

}  // namespace troupe::core::graph
