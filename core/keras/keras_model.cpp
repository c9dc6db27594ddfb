#include "core/keras/keras_model.hpp"

#include "core/graph/json_guard.hpp"

#include <cctype>
#include <set>

#include <nlohmann/json.hpp>

#include "core/layers/layers.hpp"
#include "core/ops/op.hpp"

namespace troupe::core::keras {

using namespace graph;

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
  const auto* e = layers::find_layer(class_name);
  return e != nullptr && e->reads_ids;
}

// Whether a config.json entry is an operation of keras.ops (by its module) rather than a layer.
bool is_op(const json& l) {
  const json& m = member(l, "module");
  return m.is_string() && ops::is_op_module(m.get<std::string>());
}

Expected<History> parse_history(const json& h) {
  if (!h.is_array() || h.size() < 3 || !h[0].is_string() || !h[1].is_number_integer() ||
      !h[2].is_number_integer())
    return model_error("a tensor reference must be [layer, node, tensor], got " + h.dump());
  return History{h[0].get<std::string>(), h[1].get<int64_t>(), h[2].get<int64_t>()};
}

// One call of a layer or an operation as a node of the file records it: the tensors it
// reads, in order, and (Keras 3) its arguments with their constants.
struct ParsedNode {
  std::vector<History> tensors;
  std::vector<ops::Arg> args;
  std::map<std::string, ops::Arg> kwargs;
};

// A layer's call takes tensors (a list of them for the merges) and no other argument.
Status tensors_only(const std::string& who, const ops::Arg& a) {
  if (a.kind == ops::Arg::Kind::tensor) return {};
  if (a.kind == ops::Arg::Kind::list) {
    for (const auto& e : a.items)
      if (auto st = tensors_only(who, e); !st) return st;
    return {};
  }
  if (a.kind == ops::Arg::Kind::none) return {};
  return model_error(who + " is called with " +
                     (a.kind == ops::Arg::Kind::constant ? "a constant (" + a.value.dump() + ")"
                                                         : std::string("a slice or Ellipsis")) +
                     " as an argument: Troupe's layers take tensors (keras.ops operations take "
                     "constants)");
}

// `who`: "layer 'dense' (Dense)" or "operation 'add' (Add)", for errors.
Expected<ParsedNode> parse_node(const std::string& who, bool op, const json& node) {
  ParsedNode out;
  std::vector<json> refs;
  auto history = [&](const json& h) -> Status {
    auto parsed = parse_history(h);
    if (!parsed) return parsed.error();
    out.tensors.push_back(*parsed);
    return {};
  };
  if (node.is_object()) {
    const json args = node.value("args", json::array());
    if (!args.is_array()) return model_error(who + " has a malformed inbound node");
    for (const auto& a : args) {
      auto arg = ops::parse_arg(a, refs);
      if (!arg) return model_error(who + ": " + arg.error().message);
      if (!op)
        if (auto st = tensors_only(who, *arg); !st) return st.error();
      out.args.push_back(std::move(*arg));
    }
    const json kwargs = node.value("kwargs", json::object());  // items() of a named value
    if (!kwargs.is_object()) return model_error(who + " has malformed call arguments");
    for (const auto& [k, v] : kwargs.items()) {
      if (!op) {
        if (v.is_null() || (k == "training" && v.is_boolean())) continue;
        return model_error(who + " is called with argument '" + k +
                           "', which Troupe does not support");
      }
      auto arg = ops::parse_arg(v, refs);
      if (!arg) return model_error(who + ": argument '" + k + "': " + arg.error().message);
      out.kwargs[k] = std::move(*arg);
    }
    for (const auto& r : refs)
      if (auto st = history(r); !st) return st.error();
    return out;
  }
  if (!node.is_array()) return model_error(who + " has a malformed inbound node");
  for (const auto& ref : node) {  // tf_keras 2: [[layer, node, tensor, kwargs], ...]
    if (auto st = history(ref); !st) return st.error();
    if (ref.size() > 3 && ref[3].is_object())
      for (const auto& [k, v] : ref[3].items())
        if (!v.is_null() && k != "training")
          return model_error(who + " is called with argument '" + k +
                             "', which Troupe does not support");
  }
  return out;
}

std::string who(const json& l, const std::string& name) {
  return std::string(is_op(l) ? "operation '" : "layer '") + name + "' (" +
         l.value("class_name", "") + ")";
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
  TensorSpec s;
  if (shape == nullptr && config.contains("shape") && config["shape"].is_array()) {
    for (const auto& d : config["shape"]) {  // an example's shape, without the batch axis
      if (!d.is_number_integer() || d.get<int64_t>() < 0)
        return model_error("input '" + name + "' has an unknown dimension in " +
                           config["shape"].dump() + ": Troupe needs fixed shapes");
      s.shape.push_back(d.get<int64_t>());
    }
  } else {
    if (shape == nullptr || !shape->is_array() || shape->empty())
      return model_error("input '" + name + "' has no shape");
    for (size_t i = 1; i < shape->size(); ++i) {
      const auto& d = (*shape)[i];
      if (!d.is_number_integer() || d.get<int64_t>() < 0)
        return model_error("input '" + name + "' has an unknown dimension in " + shape->dump() +
                           ": Troupe needs fixed shapes (pad variable-length features)");
      s.shape.push_back(d.get<int64_t>());
    }
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
  if (static_cast<int>(s.shape.size()) + 1 > Shape::max_rank)
    return model_error("input '" + name + "' has " + std::to_string(s.shape.size() + 1) +
                       " axes; Troupe's tensors have at most " + std::to_string(Shape::max_rank));
  if (!fits_elements(s.shape, kMaxTensorElements))
    return model_error("input '" + name + "' of " + s.to_string() + " per example is over " +
                       "Troupe's limit of " + std::to_string(kMaxTensorElements) + " elements");
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
      if (is_op(l) ? ops::op_reads_ids(l.value("class_name", ""), member(l, "config"))
                   : reads_ids(l.value("class_name", "")))
        for (const auto& node : l.value("inbound_nodes", json::array())) {
          auto ins = parse_node(who(l, l.value("name", "")), is_op(l), node);
          if (ins)
            for (const auto& h : ins->tensors)
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
        const bool op = is_op(*p.layer);
        auto ins = parse_node(who(*p.layer, name), op, member(*p.layer, "inbound_nodes")[p.node]);
        if (!ins) return ins.error();
        std::vector<int> ids;
        bool ready = true;
        for (const auto& h : ins->tensors) {
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
        auto layer = op ? make_op(*p.layer, std::move(*ins)) : layer_named(*p.layer, name);
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
  // An operation of keras.ops for one node: its own, never shared.
  Expected<std::shared_ptr<Operation>> make_op(const json& l, ParsedNode node) {
    json config = l.value("config", json::object());
    if (config.is_object() && !config.contains("name")) config["name"] = l.value("name", "");
    auto op = ops::make_op(l.value("class_name", ""), config, std::move(node.args),
                           std::move(node.kwargs));
    if (!op) return op.error();
    return std::shared_ptr<Operation>(std::move(*op));
  }

  Expected<std::unique_ptr<Operation>> make(const json& l) {
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
    // A custom class's get_config may leave out its name: the node's name stands for it.
    const std::string name = c.is_object() && c.contains("name") ? c.value("name", std::string())
                                                                 : l.value("name", std::string());
    auto path = paths_.find(name);
    // A layer that reads an asset of the file (an adapted lookup's vocabulary) finds it at
    // its place in the archive when its config does not give it.
    json config = c.is_object() ? c : json::object();
    if (!config.contains("name")) config["name"] = name;
    const auto* entry = layers::find_layer(registered);
    if (entry != nullptr && entry->asset_key != nullptr && path != paths_.end() &&
        config.value(entry->asset_key, json()).is_null())
      config[entry->asset_key] = path->second + "/" + entry->asset_file;
    auto layer = layers::make_layer(registered, config, assets_);
    if (!layer) return layer;
    if (path != paths_.end()) m_.weights_path[(*layer)->name()] = path->second;
    return layer;
  }

  // The layer of that name, made on its first call and shared by later ones.
  Expected<std::shared_ptr<Operation>> layer_named(const json& l, const std::string& name) {
    auto it = made_.find(name);
    if (it != made_.end()) return it->second;
    auto layer = make(l);
    if (!layer) return layer.error();
    std::shared_ptr<Operation> shared = std::move(*layer);
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
      if (is_op(l)) continue;  // model.layers holds layers only, not keras.ops operations
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
  std::map<std::string, std::shared_ptr<Operation>> made_;
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

}  // namespace troupe::core::keras
