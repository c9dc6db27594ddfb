#include "core/graph/layer_config.hpp"

#include <cmath>

#include <nlohmann/json.hpp>

namespace troupe::core::graph {

using nlohmann::json;

namespace {

std::string layer_name(const json& config) {
  if (!config.is_object()) return "";
  auto n = config.find("name");
  return n != config.end() && n->is_string() ? n->get<std::string>() : "";
}

}  // namespace

LayerConfig::LayerConfig(std::string class_name, const json& config,
                         const std::map<std::string, std::string>* assets)
    : ConfigArgs("layer '" + layer_name(config) + "' (" + class_name + ")", config),
      class_name_(std::move(class_name)),
      name_(layer_name(config)),
      assets_(assets) {
  ignore("name");
  if (const json* t = get("trainable"); t != nullptr && t->is_boolean())
    trainable_ = t->get<bool>();
}

Expected<ActFn> LayerConfig::activation(const std::string& key, const std::string& fallback) {
  const json* v = get(key);
  std::string name = fallback;
  if (v != nullptr && !v->is_null()) {
    if (v->is_string()) {
      name = v->get<std::string>();
    } else if (v->is_object() && v->contains("config") && (*v)["config"].is_string()) {
      name = (*v)["config"].get<std::string>();  // {"class_name": "function", "config": "relu"}
    } else {
      return error(key, "must name an activation");
    }
  }
  auto fn = parse_act_fn(name);
  if (!fn) return error(key, fn.error().message);
  return *fn;
}

Expected<Initializer> LayerConfig::initializer(const std::string& key, Initializer fallback) {
  const json* v = get(key);
  if (v == nullptr || v->is_null()) return fallback;
  std::string kind;
  json args = json::object();
  if (v->is_string()) {
    kind = v->get<std::string>();
  } else if (v->is_object() && v->contains("class_name") && (*v)["class_name"].is_string()) {
    kind = (*v)["class_name"].get<std::string>();
    if (v->contains("config") && (*v)["config"].is_object()) args = (*v)["config"];
  } else {
    return error(key, "must be an initializer");
  }
  uint64_t seed = fallback.seed;
  if (args.contains("seed") && args["seed"].is_number_integer())
    seed = args["seed"].get<uint64_t>();
  auto num = [&](const char* k, double d) {
    return args.contains(k) && args[k].is_number() ? args[k].get<double>() : d;
  };
  using K = Initializer::Kind;
  if (kind == "GlorotUniform" || kind == "glorot_uniform")
    return Initializer{K::glorot_uniform, 0.0f, seed};
  if (kind == "Zeros" || kind == "zeros") return Initializer{K::zeros, 0.0f, seed};
  if (kind == "Ones" || kind == "ones") return Initializer{K::constant, 1.0f, seed};
  if (kind == "Constant" || kind == "constant")
    return Initializer{K::constant, to_float(num("value", 0.0)), seed};
  if (kind == "RandomUniform" || kind == "random_uniform" || kind == "uniform") {
    const double lo = num("minval", -0.05), hi = num("maxval", 0.05);
    if (lo != -hi) return error(key, "RandomUniform needs minval = -maxval in Troupe");
    return Initializer{K::random_uniform, to_float(hi), seed};
  }
  if (kind == "RandomNormal" || kind == "random_normal" || kind == "normal") {
    if (num("mean", 0.0) != 0.0) return error(key, "RandomNormal needs mean 0 in Troupe");
    return Initializer{K::random_normal, to_float(num("stddev", 0.05)), seed};
  }
  if (kind == "TruncatedNormal" || kind == "truncated_normal") {
    if (num("mean", 0.0) != 0.0) return error(key, "TruncatedNormal needs mean 0 in Troupe");
    return Initializer{K::truncated_normal, to_float(num("stddev", 0.05)), seed};
  }
  return error(key, "initializer '" + kind +
                        "' is not supported (Troupe has GlorotUniform, Zeros, Ones, Constant, "
                        "RandomUniform, RandomNormal, TruncatedNormal); a .keras file with "
                        "weights needs none");
}

uint64_t LayerConfig::seed_for(const std::string& weight) const {
  uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a
  for (char ch : name_ + "/" + weight) {
    h ^= static_cast<unsigned char>(ch);
    h *= 0x100000001b3ULL;
  }
  return h;
}

Expected<std::vector<std::string>> LayerConfig::vocabulary(const std::string& key) {
  const json* v = get(key);
  std::vector<std::string> out;
  if (v == nullptr || v->is_null()) return out;
  if (v->is_array()) {
    for (const auto& e : *v) {
      if (e.is_string())
        out.push_back(e.get<std::string>());
      else if (e.is_number_integer())
        out.push_back(std::to_string(e.get<int64_t>()));
      else
        return error(key, "must be a list of strings or integers");
    }
    return out;
  }
  if (v->is_string()) {
    const auto path = v->get<std::string>();
    if (assets_ != nullptr) {
      for (const auto& [name, bytes] : *assets_) {
        if (name != path && (name.size() < path.size() ||
                             name.compare(name.size() - path.size(), path.size(), path) != 0))
          continue;
        size_t start = 0;
        while (start < bytes.size()) {
          size_t end = bytes.find('\n', start);
          if (end == std::string::npos) end = bytes.size();
          out.push_back(bytes.substr(start, end - start));
          start = end + 1;
        }
        return out;
      }
    }
    return error(key, "names a vocabulary file the model file does not hold");
  }
  return error(key, "must be a list or a file name");
}

}  // namespace troupe::core::graph
