#pragma once

// A Keras model file as Troupe trains it: the layer graph of its architecture with the
// file's weights, its compile settings, and what it takes to write the trained model back
// as a .keras file that Keras loads. Reads a .keras zip, or the JSON of model.to_json()
// (Keras 3 or tf_keras 2: architecture only, the weights from the layers' initializers).
//
//   auto m = keras::load_model("m.keras");        // errors name the file and the part
//   m->model.graph->forward(...);                  // core/graph/graph.hpp
//   keras::save_model("trained.keras", *m, values); // the trained values, by weight path

#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "core/expected.hpp"
#include "core/keras/keras_file.hpp"
#include "core/keras/keras_model.hpp"

namespace troupe::core::keras {

struct LoadedModel {
  std::string source;  // the file's name, for errors
  keras::KerasModel model;
  /// The model description (config.json's object, or the to_json() JSON).
  nlohmann::json config;
  /// Its compile settings (config.json's "compile_config"), null when it has none.
  nlohmann::json compile_config;
  /// Whether the weights came from the file (a .keras file) or from initializers (JSON).
  bool weights_from_file = false;
  /// Keras 3's form: the model can be written back as a .keras file.
  bool keras3 = false;
  /// The .keras file as read (metadata, weight groups, assets), its datasets dropped once
  /// given to the graph.
  KerasFile file;
};

/// Reads a model from a .keras file's bytes or a to_json() document, whichever `bytes`
/// holds; `name` stands for the file in errors.
/// `worker_copy`: the bytes may be a copy without_tables() wrote (a parameter-server
/// worker's); elsewhere such a copy is an invalid_argument error naming it.
Expected<LoadedModel> load_model_bytes(const std::string& bytes, const std::string& name,
                                       bool worker_copy = false);
Expected<LoadedModel> load_model(const std::string& path);

/// Sets every weight of the model's graph from `file`'s datasets ("<layer path>/vars/<i>"),
/// tables included (held on the host): a missing dataset, or one of another shape, is an
/// invalid_argument error naming the layer, the weight and the file. A file written by
/// without_tables() lacks the tables' datasets: taken with `worker_copy` (the tables are left
/// without a value), refused otherwise (its tables are not in it).
Status set_weights_from(keras::KerasModel& model, const KerasFile& file, const std::string& name,
                        bool worker_copy = false);

/// The datasets of a weights file holding `values` (by graph weight path, "dense/kernel"),
/// at the paths Keras reads them from; a weight of the graph missing from `values` is an
/// error naming it. Without `tables`, the embedding tables are left out (and need no value).
/// Host tensors are moved out of `values` (a caller that keeps them passes a copy).
Expected<std::map<std::string, Tensor>> keras_datasets(const keras::KerasModel& model,
                                                       std::map<std::string, Tensor> values,
                                                       bool tables = true);

/// metadata.json's key (value "parameter servers") that marks a file written by
/// without_tables(): its embedding tables are held elsewhere and absent from the file.
inline constexpr const char* tables_elsewhere_key = "troupe_tables";

/// The bytes of a .keras file of `m` without its embedding tables: the architecture, compile
/// settings and assets as they are, the non-table weights from `values` (by graph weight
/// path; the tables need none), and metadata.json marked (tables_elsewhere_key). What a
/// parameter-server job's chief sends its workers: they pull the rows a batch needs from
/// the PS tasks and never hold a table, so the file they get does not carry one. Reading
/// it (load_model_bytes with worker_copy) gives a graph whose tables have no value
/// (Weight::value empty); every other weight is checked as in any file.
Expected<std::string> without_tables(const LoadedModel& m,
                                     const std::map<std::string, Tensor>& values);

/// Writes a .keras file of `m`'s architecture, compile settings and assets with the weights
/// `values` (by graph weight path; see keras_datasets), atomically. Only a model read in
/// Keras 3's form can be written (a tf_keras 2 JSON is refused, naming why). `values` is
/// taken (moved into the file's datasets): a caller that keeps them passes a copy.
Status save_model(const std::string& path, const LoadedModel& m,
                  std::map<std::string, Tensor> values);

/// The current values of every weight of a graph that holds them all, by path (tables
/// included, on the host).
std::map<std::string, Tensor> graph_values(const graph::Graph& graph);

}  // namespace troupe::core::keras
