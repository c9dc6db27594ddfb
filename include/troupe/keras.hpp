#pragma once

// A Keras model as a Troupe model. A `.keras` file (or the JSON of model.to_json()) is read
// as a layer graph with its weights and compile settings (core/graph, core/keras); the file's
// bytes are the model: they travel to every worker as data (with the description of the
// data), so every task runs the same generic program and no user code.
//
//   auto source = troupe::read_keras_source("ctr.keras").value();
//   troupe::ModelSpec spec;
//   spec.keras = source;                        // the rest of the spec from the file
//   troupe::Model model(spec);
//   troupe::fit(model, data, options);          // or with a ParameterServerStrategy

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/data/columns.hpp"
#include "core/data/named_input.hpp"
#include "core/expected.hpp"
#include "troupe/strategy.hpp"

namespace troupe {

/// A Keras model file's bytes and what identifies them.
struct KerasSource {
  std::string name;    // the file's name, in errors and as the model's name
  std::string bytes;   // a .keras file (zip), or a to_json() document
  std::string sha256;  // of bytes, hex
};

/// Reads a model file. A file that cannot be read is not_found / io_error naming it; its
/// contents are checked when a Model is made from it.
core::Expected<std::shared_ptr<const KerasSource>> read_keras_source(const std::string& path);
/// A model file's bytes held in memory (a .keras file Keras wrote to a buffer, a to_json()
/// document), named `name` in errors.
std::shared_ptr<const KerasSource> keras_source(std::string name, std::string bytes);

/// How Troupe trains a Keras model beyond what its file says.
struct KerasOptions {
  /// An output's label column in the data, by output name. Default: "label" for a model of
  /// one output, the output's own name for several.
  std::map<std::string, std::string> labels;
  /// Embedding layers (by layer name) whose tables are dynamic tables on the PS tasks: ids
  /// are raw 64-bit keys, rows are admitted and evicted as the spec says (its width is the
  /// layer's output_dim). ParameterServerStrategy only.
  std::map<std::string, DynamicTableSpec> dynamic_tables;
  /// A compile_config (JSON, Keras's form) used instead of the file's, or where it has none.
  std::string compile_json;
  /// Whether save_keras writes compile_json as the saved file's compile_config (as Keras's
  /// compile() then save() does): for settings Keras serialized itself (Python's
  /// compile()). Off, the saved file keeps the source file's: a shorthand given by hand
  /// (troupe train --compile) or a stand-in that only lets a model saved without compile()
  /// be built may not be what Keras can load.
  bool save_compile = false;
  /// Seed of the dropout masks.
  uint64_t seed = 1;
};

/// The data a model's graph and compile settings read: each input by name with its kind
/// and per-example shape, then each output's label column (class indices as ints for the
/// sparse losses, floats of the output's shape otherwise).
core::Expected<std::vector<core::FeatureSpec>> keras_feature_specs(const KerasSource& source,
                                                                   const KerasOptions& options);

class Model;

/// Writes `model` (made from a Keras source) as a .keras file that Keras loads: its graph
/// and compile settings as read, its weights as they are now (read from the PS tasks when
/// the model is attached to a ParameterServerStrategy). A model with a dynamic table is an
/// invalid_argument error (a Keras Embedding holds no keyed rows), as is a model not made
/// from a Keras source; a file that cannot be written is io_error, naming it.
core::Status save_keras(Model& model, const std::string& path);

class Registry;

/// What the chief sends every worker to train a Keras model: the model, how to train it,
/// where it computes, and its data (files, format, batch; the features come from the model).
struct KerasJob {
  std::shared_ptr<const KerasSource> source;
  KerasOptions options;
  std::vector<std::string> files;
  core::NamedInputOptions data;
  /// The validation files (same format and batch as `data`), read in order by each worker
  /// on its first validation step: Model::evaluate_distributed() scores batch i of them
  /// with the step "keras/validate".
  std::vector<std::string> validation;
  std::string device = "cpu";
  std::string precision = "float32";
};

/// What the chief of a parameter-server job sends its workers instead of the whole model
/// file: `model`'s (the chief's Model of a Keras source) file without its embedding tables
/// (core::keras::without_tables: the workers pull the rows a batch needs from the PS tasks
/// and never hold a table), its name and sha256 the original's (the model's identity). A
/// model of a to_json() description carries no weights: its source as it is. A large
/// table so costs each worker neither its bytes on the wire nor their memory.
core::Expected<std::shared_ptr<const KerasSource>> worker_keras_source(Model& model);

/// The job as the arguments of the per-worker dataset "keras" (DatasetCreator::args), and
/// back; a damaged encoding is an invalid_argument error.
std::vector<char> encode_keras_job(const KerasJob& job);
core::Expected<KerasJob> decode_keras_job(const std::vector<char>& bytes);

/// Registers what every worker of a Keras job runs, in any process's registry: the dataset
/// "keras" (its arguments a KerasJob: building it installs the model in this process and
/// reads this worker's share of the files), the step "keras/train" (pulls the dense
/// variables and the batch's table rows, trains, pushes gradients, returns BatchStats),
/// "keras/evaluate" (a batch of the dataset, nothing pushed) and "keras/validate" (batch i
/// of the job's validation files, nothing pushed).
void register_keras(Registry& registry);

}  // namespace troupe
