#include "core/keras/model_file.hpp"
#include "core/json_limits.hpp"

#include <fstream>
#include <sstream>

namespace troupe::core::keras {

using nlohmann::json;

namespace {

bool looks_like_zip(const std::string& bytes) {
  return bytes.size() >= 4 && bytes.compare(0, 4, "PK\x03\x04") == 0;
}

// Keras 3 writes "module" keys and no keras_version; tf_keras 2's to_json() writes
// "keras_version": "2.x" and "backend".
bool keras3_form(const json& j) {
  if (j.contains("keras_version") && j["keras_version"].is_string() &&
      j["keras_version"].get<std::string>().rfind("2.", 0) == 0)
    return false;
  return true;
}

Expected<LoadedModel> from_config(LoadedModel m, const json& config) {
  m.config = config;
  if (config.contains("compile_config")) m.compile_config = config["compile_config"];
  auto built = keras::build_keras_model(config, &m.file.assets, &m.file.weight_groups);
  if (!built) return make_error(built.error().code, m.source + ": " + built.error().message);
  m.model = std::move(*built);
  return m;
}

}  // namespace

Expected<LoadedModel> load_model_bytes(const std::string& bytes, const std::string& name,
                                       bool worker_copy) {
  LoadedModel m;
  m.source = name;
  if (looks_like_zip(bytes)) {
    auto file = read_keras_bytes(bytes, name);
    if (!file) return file.error();
    m.file = std::move(*file);
    m.keras3 = true;
    m.weights_from_file = true;
    const json config = m.file.config;
    auto loaded = from_config(std::move(m), config);
    if (!loaded) return loaded;
    if (auto st = set_weights_from(loaded->model, loaded->file, name, worker_copy); !st)
      return st.error();
    loaded->file.weights.clear();  // given to the graph
    return loaded;
  }
  if (const int d = json_depth(bytes); d > kMaxJsonDepth)
    return make_error(Errc::invalid_argument, name + ": JSON nested " + std::to_string(d) +
                                                  " levels deep, over Troupe's limit of " +
                                                  std::to_string(kMaxJsonDepth));
  json doc = json::parse(bytes, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded())
    return make_error(Errc::data_loss, name + ": neither a .keras file (zip) nor JSON");
  if (!doc.is_object() || !doc.contains("class_name") || !doc.contains("config"))
    return make_error(Errc::invalid_argument,
                      name + ": not a Keras model description (no class_name and config)");
  m.keras3 = keras3_form(doc);
  m.file.config = doc;
  return from_config(std::move(m), doc);
}

Expected<LoadedModel> load_model(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(Errc::not_found, path + ": cannot be opened");
  std::ostringstream buf;
  buf << in.rdbuf();
  if (!in.good() && !in.eof()) return make_error(Errc::io_error, path + ": read failed");
  return load_model_bytes(buf.str(), path);
}

Status set_weights_from(keras::KerasModel& model, const KerasFile& file, const std::string& name,
                        bool worker_copy) {
  const bool tables_elsewhere = file.metadata.is_object() &&
                                file.metadata.contains(tables_elsewhere_key) &&
                                file.metadata[tables_elsewhere_key] == "parameter servers";
  if (tables_elsewhere && !worker_copy)
    return make_error(Errc::invalid_argument,
                      name +
                          ": a parameter-server worker's copy of a model, without its "
                          "embedding tables (metadata.json's " +
                          tables_elsewhere_key + "): give the model file itself");
  for (const auto& layer : model.graph->operations()) {
    auto& weights = layer->weights();
    if (weights.empty()) continue;
    auto path = model.weights_path.find(layer->name());
    if (path == model.weights_path.end())
      return layer->error(name + ": has no place in the weights file");
    for (size_t i = 0; i < weights.size(); ++i) {
      auto& w = weights[i];
      const std::string at = path->second + "/vars/" + std::to_string(i);
      auto it = file.weights.find(at);
      if (it == file.weights.end() && w.table && tables_elsewhere) continue;
      if (it == file.weights.end())
        return layer->error(name + ": model.weights.h5 has no " + at + " for its weight '" +
                            w.name + "'");
      const Tensor& t = it->second;
      if (t.shape() != w.shape)
        return layer->error(name + ": " + at + " has shape " + t.shape().to_string() +
                            ", its weight '" + w.name + "' is " + w.shape.to_string());
      Tensor value = t;
      if (t.dtype() != DType::float32) {  // an integer variable (a counter): as floats
        value = Tensor(t.shape());
        for (int64_t k = 0; k < t.size(); ++k)
          value[k] = static_cast<float>(t.data_as<int64_t>()[k]);
      }
      if (w.table || w.value.device().is_cpu())
        w.value = std::move(value);
      else
        w.value.set(value);
    }
  }
  return {};
}

Expected<std::map<std::string, Tensor>> keras_datasets(const keras::KerasModel& model,
                                                       std::map<std::string, Tensor> values,
                                                       bool tables) {
  std::map<std::string, Tensor> out;
  for (const auto& ref : model.graph->weights()) {
    if (!tables && ref.weight().table) continue;
    auto v = values.find(ref.path);
    if (v == values.end())
      return make_error(Errc::invalid_argument,
                        "no value for the model's weight '" + ref.path + "'");
    if (v->second.shape() != ref.weight().shape)
      return make_error(Errc::invalid_argument, "the value of '" + ref.path + "' has shape " +
                                                    v->second.shape().to_string() +
                                                    ", the model's is " +
                                                    ref.weight().shape.to_string());
    Tensor& value = v->second;
    out[model.weights_path.at(ref.layer->name()) + "/vars/" + std::to_string(ref.index)] =
        value.device().is_cpu() ? std::move(value) : value.to(Device::cpu());
  }
  return out;
}

namespace {

// The .keras file of `m`'s architecture, compile settings and assets with `datasets` as its
// weights: every layer's group named as Keras writes it, no optimizer variables (Keras
// builds its optimizer afresh).
KerasFile file_of(const LoadedModel& m, std::map<std::string, Tensor> datasets) {
  KerasFile out = m.file;
  out.config = m.config;
  out.weights = std::move(datasets);
  for (auto it = out.weight_groups.begin(); it != out.weight_groups.end();)
    it = it->first.rfind("optimizer", 0) == 0 ? out.weight_groups.erase(it) : std::next(it);
  if (out.metadata.empty() || !out.metadata.is_object())
    out.metadata = json{{"keras_version", "3.0.0"}};
  // Every layer has its group, with or without variables, as Keras writes it.
  for (const auto& [layer, p] : m.model.weights_path)
    if (out.weight_groups.find(p + "/vars") == out.weight_groups.end())
      out.weight_groups[p + "/vars"] = layer;
  return out;
}

}  // namespace

Status save_model(const std::string& path, const LoadedModel& m,
                  std::map<std::string, Tensor> values) {
  if (!m.keras3)
    return make_error(Errc::invalid_argument,
                      m.source +
                          ": a tf_keras 2 model description cannot be written as a "
                          "Keras 3 .keras file; save the model with Keras 3 first");
  auto datasets = keras_datasets(m.model, std::move(values));
  if (!datasets) return datasets.error();
  return write_keras(path, file_of(m, std::move(*datasets)));
}

Expected<std::string> without_tables(const LoadedModel& m,
                                     const std::map<std::string, Tensor>& values) {
  auto datasets = keras_datasets(m.model, values, /*tables=*/false);
  if (!datasets) return datasets.error();
  KerasFile out = file_of(m, std::move(*datasets));
  out.weights_h5.reset();  // the original's stored types are not needed: written as float32
  out.metadata[tables_elsewhere_key] = "parameter servers";
  return write_keras_bytes(out, m.source);
}

std::map<std::string, Tensor> graph_values(const graph::Graph& graph) {
  std::map<std::string, Tensor> out;
  for (const auto& ref : graph.weights())
    out[ref.path] = ref.weight().value.to(Device::cpu());
  return out;
}

}  // namespace troupe::core::keras
