#include "troupe/export.hpp"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <filesystem>

#include "core/keras/builtin_models.hpp"
#include "troupe/model.hpp"

namespace troupe {

bool is_keras_path(const std::string& path) {
  const std::string keras = ".keras";
  if (path.size() <= keras.size()) return false;
  std::string tail = path.substr(path.size() - keras.size());
  std::transform(tail.begin(), tail.end(), tail.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return tail == keras;
}

core::Status write_exported_model(const std::string& path, const core::CtrExport& model) {
  if (is_keras_path(path)) return core::keras::write_ctr_keras(path, model);
  return core::write_ctr_export(path, model);
}

namespace {

// The model's table rows (a dynamic table's rows seen at least `min_count` times, with their
// keys) into `model`, then the file: what both exports end with.
core::Expected<ExportReport> export_table(ParameterServerStrategy& strategy, const Variable& table,
                                          core::CtrExport& model, const std::string& path,
                                          int32_t min_count,
                                          std::chrono::steady_clock::time_point t0) {
  if (model.config.dynamic) {
    auto rows = strategy.read_table(table, min_count);
    if (!rows) return rows.error();
    model.keys = std::move(rows->keys);
    model.rows = std::move(rows->values);
  } else {
    auto rows = strategy.read(table);
    if (!rows) return rows.error();
    model.rows = std::move(*rows);
  }
  if (auto st = write_exported_model(path, model); !st) return st.error();
  ExportReport r;
  r.rows = model.rows.shape()[0];
  std::error_code ec;
  r.bytes = static_cast<int64_t>(std::filesystem::file_size(path, ec));
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace

core::Expected<ExportReport> export_ctr_model(ParameterServerStrategy& strategy,
                                              const core::CtrExportConfig& config,
                                              const std::vector<Variable>& dense,
                                              const Variable& table, const std::string& path,
                                              int32_t min_count) {
  const auto t0 = std::chrono::steady_clock::now();
  core::CtrExport model;
  model.config = config;
  for (const auto& v : dense) {
    auto value = strategy.read(v);
    if (!value) return value.error();
    model.dense.emplace(v.name, std::move(*value));
  }
  return export_table(strategy, table, model, path, min_count, t0);
}

core::Expected<ExportReport> export_ctr_model(Model& model, const core::CtrExportConfig& config,
                                              const std::string& path, int32_t min_count) {
  const auto t0 = std::chrono::steady_clock::now();
  ParameterServerStrategy* strategy = model.strategy();
  if (strategy == nullptr)
    return core::make_error(core::Errc::invalid_argument,
                            path + ": the model is not attached to a ParameterServerStrategy");
  std::map<std::string, core::Tensor> weights;
  const Variable* table = nullptr;
  for (const auto& v : model.variables()) {
    if (v.name == "embedding/embeddings") {
      table = &v;
      continue;
    }
    auto value = strategy->read(v);
    if (!value) return value.error();
    weights.emplace(v.name, std::move(*value));
  }
  if (table == nullptr)
    return core::make_error(core::Errc::invalid_argument,
                            path +
                                ": the model has no table 'embedding/embeddings' (it is not "
                                "the built-in CTR model's Keras form)");
  auto dense = core::keras::ctr_program_values(config.model, weights);
  if (!dense) return core::make_error(dense.error().code, path + ": " + dense.error().message);
  core::CtrExport out;
  out.config = config;
  out.dense = std::move(*dense);
  return export_table(*strategy, *table, out, path, min_count, t0);
}

}  // namespace troupe
