#pragma once

// An inference model written from a running job: the chief reads the dense variables and
// the embedding table from the PS tasks and writes a `troupe export` file
// (core/nn/ctr_export.hpp) that troupe::Predictor and `troupe predict` load, or, to a path
// ending in ".keras", the model as a Keras file (core/keras/builtin_models.hpp) that Keras
// and `troupe predict` load.
//
//   auto r = troupe::export_ctr_model(strategy, config, dense, table, "/models/ctr.tmodel");
//
// The file is written whole under another name and renamed into place, so a server that
// reloads it never sees half of one. Exported while workers push, each variable (and each
// page of a dynamic table) is as of its own read: the model is as consistent as an
// asynchronous step's view of it, not a snapshot of one instant. Exported after join(), it
// is exactly the trained model.

#include <cstdint>
#include <string>
#include <vector>

#include "core/expected.hpp"
#include "core/nn/ctr_export.hpp"
#include "troupe/strategy.hpp"

namespace troupe {

struct ExportReport {
  int64_t rows = 0;   // table rows written
  int64_t bytes = 0;  // of the file
  double seconds = 0;
};

/// Whether `path` names a Keras file (ends in ".keras", any case).
bool is_keras_path(const std::string& path);

/// Writes an exported model to `path`: a path ending in ".keras" gets the model's Keras
/// form (core/keras/builtin_models.hpp: a fixed table in float32 only), any other Troupe's export
/// format (core::write_ctr_export). Errors name the file.
core::Status write_exported_model(const std::string& path, const core::CtrExport& model);

/// Exports the model `config` describes: `dense` are its parameters' variables (named as
/// core::ctr_dense_variables() names them), `table` its embedding table (fixed or dynamic,
/// as config.dynamic says). A dynamic table keeps only rows seen at least `min_count`
/// times. Errors name the variable or the file; a failed write leaves the file as it was.
core::Expected<ExportReport> export_ctr_model(ParameterServerStrategy& strategy,
                                              const core::CtrExportConfig& config,
                                              const std::vector<Variable>& dense,
                                              const Variable& table, const std::string& path,
                                              int32_t min_count = 0);

class Model;

/// Exports `model`, the built-in CTR model's Keras form (core::keras::ctr_model_config, as
/// ctr_fit trains it) attached to a ParameterServerStrategy, as export_ctr_model above: its
/// variables read from the PS tasks under their graph paths and written under the
/// programs' names (core::keras::ctr_program_values), its table `embedding/embeddings` (a
/// dynamic one when config.dynamic, keeping rows seen at least `min_count` times). A model
/// not attached, or of another form, is an invalid_argument error.
core::Expected<ExportReport> export_ctr_model(Model& model, const core::CtrExportConfig& config,
                                              const std::string& path, int32_t min_count = 0);

}  // namespace troupe
