#pragma once

// A Keras model's architecture (config.json of a .keras file, or model.to_json() in the
// Keras 3 and tf_keras 2 forms) made into a layer graph: Sequential and Functional models,
// several inputs and outputs, shared layers. Every layer, argument and dtype is checked
// here, before any task trains: what Troupe does not support is an error naming the layer,
// its class and the argument.
//
//   auto model = keras::build_keras_model(config_json);   // Expected<KerasModel>
//   model->graph->inputs();                               // names and specs, for the data

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/expected.hpp"
#include "core/graph/graph.hpp"

namespace troupe::core::keras {

struct KerasModel {
  std::string name;        // the model's name
  std::string class_name;  // "Sequential" or "Functional"
  std::unique_ptr<graph::Graph> graph;
  /// Per layer in graph->operations(), the path Keras saves its variables under in
  /// model.weights.h5 ("layers/dense_1"), whose "vars/<i>" are its weights in order.
  std::map<std::string, std::string> weights_path;
};

/// Builds the graph of a model config: the object with "class_name" and "config" (what
/// config.json and to_json() hold). `assets`: the .keras file's other entries (lookup
/// layers' vocabularies), or null. `groups`: its weights file's groups with their "name"
/// attributes (keras::KerasFile::weight_groups), which say where each layer's variables
/// and assets are; without them the places are Keras's naming of model.layers in order.
Expected<KerasModel> build_keras_model(const nlohmann::json& model,
                                       const std::map<std::string, std::string>* assets = nullptr,
                                       const std::map<std::string, std::string>* groups = nullptr);

}  // namespace troupe::core::keras
