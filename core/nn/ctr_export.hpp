#pragma once

// A click-through-rate model exported for serving: the model's shape, its dense
// parameters, and its embedding table's rows without optimizer slots (a fixed table's rows
// by row number, a dynamic table's by 64-bit key), optionally in bfloat16. One file in the
// checkpoint format (core/checkpoint: CRC-checked records, atomic write), so a damaged file
// is an error naming the file and the offset of the damage.
//
// Entries: ints "export/config" (the JSON of CtrExportConfig as text), tensors
// "dense/<parameter name>" (ctr_dense_variables()), and the table: tensor "table/rows"
// [rows, row_width] in float32, or ints "table/rows_bf16" (four bfloat16 values an int,
// row-major); for a dynamic table ints "table/keys" (a key a row).

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/expected.hpp"
#include "core/nn/ctr_model.hpp"
#include "core/tensor.hpp"

namespace troupe::core {

struct CtrExportConfig {
  CtrModelConfig model;
  bool dynamic = false;           // rows keyed by 64-bit ids (Criteo text parsed with raw_keys)
  int64_t buckets_per_field = 0;  // a fixed table: hash buckets of each field
  bool bf16 = false;              // rows stored (and held by a Predictor) in bfloat16
  /// How it was trained (core::make_optimizer's name and its rate), for the compile
  /// settings of its Keras form (core/keras/builtin_models.hpp); "" where not recorded.
  std::string optimizer;
  float learning_rate = 0.0f;
};

struct CtrExport {
  CtrExportConfig config;
  std::map<std::string, Tensor> dense;  // by parameter name
  std::vector<int64_t> keys;            // a dynamic table: a key a row
  Tensor rows;                          // [rows, row_width], float32 (rounded if bf16)
};

/// The config as the JSON text an export holds (and ctr_ps writes beside its PS snapshots as
/// ctr_model.json, for `troupe export`), and back; a bad text is a data_loss error.
std::string ctr_export_config_text(const CtrExportConfig& config);
Expected<CtrExportConfig> parse_ctr_export_config(const std::string& text);

/// Writes `model` to `path` (rows as bfloat16 when config.bf16). Refuses an export whose
/// parts do not match its config (invalid_argument).
Status write_ctr_export(const std::string& path, const CtrExport& model);

/// Reads and checks an export: the config, every dense parameter of the model it
/// describes with its shape, a table of row_width columns (a fixed table: fields x
/// buckets rows; a dynamic one: as many keys as rows, no key twice), finite values. Any
/// mismatch is a data_loss error naming the file and the entry.
Expected<CtrExport> read_ctr_export(const std::string& path);

}  // namespace troupe::core
