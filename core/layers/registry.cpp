#include <algorithm>

#include <nlohmann/json.hpp>

#include "core/graph/json_guard.hpp"
#include "core/layers/layers.hpp"

namespace troupe::core::layers {

// The factories (core/layers/<name>.cpp): a new layer's is declared here, beside its entry.
Expected<std::unique_ptr<graph::Operation>> make_dense(LayerConfig& c);
Expected<std::unique_ptr<graph::Operation>> make_activation(LayerConfig& c);
// layer graph: basic
Expected<std::unique_ptr<graph::Operation>> make_flatten(LayerConfig& c);
Expected<std::unique_ptr<graph::Operation>> make_reshape(LayerConfig& c);
Expected<std::unique_ptr<graph::Operation>> make_identity(LayerConfig& c);
Expected<std::unique_ptr<graph::Operation>> make_concatenate(LayerConfig& c);
Expected<std::unique_ptr<graph::Operation>> make_add(LayerConfig& c);  // merge.cpp
Expected<std::unique_ptr<graph::Operation>> make_subtract(LayerConfig& c);
Expected<std::unique_ptr<graph::Operation>> make_multiply(LayerConfig& c);
Expected<std::unique_ptr<graph::Operation>> make_average(LayerConfig& c);
Expected<std::unique_ptr<graph::Operation>> make_maximum(LayerConfig& c);  // merge_extremum.cpp
Expected<std::unique_ptr<graph::Operation>> make_minimum(LayerConfig& c);
Expected<std::unique_ptr<graph::Operation>> make_dot(LayerConfig& c);
Expected<std::unique_ptr<graph::Operation>> make_dropout(LayerConfig& c);
Expected<std::unique_ptr<graph::Operation>> make_batch_normalization(LayerConfig& c);
Expected<std::unique_ptr<graph::Operation>> make_layer_normalization(LayerConfig& c);
Expected<std::unique_ptr<graph::Operation>> make_global_average_pooling1d(LayerConfig& c);
Expected<std::unique_ptr<graph::Operation>> make_global_max_pooling1d(
    LayerConfig& c);  // global_pooling1d.cpp
Expected<std::unique_ptr<graph::Operation>> make_rescaling(LayerConfig& c);
// layer graph: sparse
Expected<std::unique_ptr<graph::Operation>> make_conv2d(LayerConfig& c);
Expected<std::unique_ptr<graph::Operation>> make_max_pooling2d(LayerConfig& c);  // pooling2d.cpp
Expected<std::unique_ptr<graph::Operation>> make_average_pooling2d(LayerConfig& c);
Expected<std::unique_ptr<graph::Operation>> make_global_average_pooling2d(LayerConfig& c);
Expected<std::unique_ptr<graph::Operation>> make_embedding(LayerConfig& c);
Expected<std::unique_ptr<graph::Operation>> make_hashing(LayerConfig& c);
Expected<std::unique_ptr<graph::Operation>> make_integer_lookup(LayerConfig& c);
Expected<std::unique_ptr<graph::Operation>> make_string_lookup(LayerConfig& c);
Expected<std::unique_ptr<graph::Operation>> make_cross(LayerConfig& c);
Expected<std::unique_ptr<graph::Operation>> make_factorization_machine(LayerConfig& c);

Expected<std::unique_ptr<graph::Operation>> make_relu(LayerConfig& c);  // relu.cpp
Expected<std::unique_ptr<graph::Operation>> make_leaky_relu(LayerConfig& c);

namespace {

// Every layer Troupe has, by Keras class name (custom layers by their registered name).
constexpr LayerEntry kLayers[] = {
    {"Dense", make_dense},
    {"Activation", make_activation},
    {"ReLU", make_relu},
    {"LeakyReLU", make_leaky_relu},
    // layer graph: basic
    {"Flatten", make_flatten},
    {"Reshape", make_reshape},
    {"Identity", make_identity},
    {"Concatenate", make_concatenate},
    {"Add", make_add},
    {"Subtract", make_subtract},
    {"Multiply", make_multiply},
    {"Average", make_average},
    {"Maximum", make_maximum},
    {"Minimum", make_minimum},
    {"Dot", make_dot},
    {"Dropout", make_dropout},
    {"BatchNormalization", make_batch_normalization},
    {"LayerNormalization", make_layer_normalization},
    {"GlobalAveragePooling1D", make_global_average_pooling1d},
    {"GlobalMaxPooling1D", make_global_max_pooling1d},
    {"Rescaling", make_rescaling},
    // layer graph: sparse
    {"Conv2D", make_conv2d},
    {"MaxPooling2D", make_max_pooling2d},
    {"AveragePooling2D", make_average_pooling2d},
    {"GlobalAveragePooling2D", make_global_average_pooling2d},
    {"Embedding", make_embedding, /*reads_ids=*/true},
    {"Hashing", make_hashing, /*reads_ids=*/true, /*makes_ids=*/true},
    {"IntegerLookup", make_integer_lookup, /*reads_ids=*/true, false, "vocabulary",
     "vocabulary.txt"},
    {"StringLookup", make_string_lookup, false, false, "vocabulary", "vocabulary.txt"},
    {"Cross", make_cross},
    {"FactorizationMachine", make_factorization_machine},
};

// Keras's dtype policies a float layer may carry: float32 computes as written; the mixed
// policies compute as the job's --precision says.
Status check_dtype(LayerConfig& c, bool ids) {
  const auto& d = c.raw("dtype");
  std::string name;
  if (d.is_null()) return {};
  if (d.is_string())
    name = d.get<std::string>();
  else if (d.is_object() && d.contains("config") && d["config"].is_object() &&
           d["config"].contains("name") && d["config"]["name"].is_string())
    name = d["config"]["name"].get<std::string>();
  if (name == "float32" || name == "mixed_float16" || name == "mixed_bfloat16") return {};
  if (ids && (name == "int64" || name == "int32")) return {};  // ids are int64 on the host
  return c.error("dtype", "Troupe computes float32 (or the job's --precision)");
}

}  // namespace

namespace {

Expected<std::unique_ptr<graph::Operation>> make_layer_unguarded(
    const std::string& class_name, const nlohmann::json& config,
    const std::map<std::string, std::string>* assets) {
  const LayerEntry* found = find_layer(class_name);
  LayerConfig c(class_name, config, assets);
  if (found == nullptr) {
    std::string known;
    for (const auto& k : layer_classes())
      known += (known.empty() ? "" : ", ") + k;
    return make_error(Errc::invalid_argument, "layer '" + c.name() + "' (" + class_name +
                                                  "): Troupe has no layer of this class (it has " +
                                                  known + ")");
  }
  if (auto st = check_dtype(c, found->makes_ids); !st) return st.error();
  c.raw("trainable");
  auto layer = found->make(c);
  if (!layer) return layer;
  if (auto st = c.finish(); !st) return st.error();
  (*layer)->set_trainable(c.trainable());
  return layer;
}

}  // namespace

const LayerEntry* find_layer(const std::string& class_name) {
  for (const auto& e : kLayers)
    if (class_name == e.class_name) return &e;
  const auto gt = class_name.rfind('>');  // a registered custom class: "package>Name"
  if (gt != std::string::npos)
    for (const auto& e : kLayers)
      if (class_name.compare(gt + 1, std::string::npos, e.class_name) == 0) return &e;
  return nullptr;
}

Expected<std::unique_ptr<graph::Operation>> make_layer(
    const std::string& class_name, const nlohmann::json& config,
    const std::map<std::string, std::string>* assets) {
  return graph::guard_json("layer config",
                           [&] { return make_layer_unguarded(class_name, config, assets); });
}

std::vector<std::string> layer_classes() {
  std::vector<std::string> out;
  for (const auto& e : kLayers)
    out.emplace_back(e.class_name);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace troupe::core::layers
