#include "troupe/export.hpp"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <filesystem>

#include "core/keras/builtin_models.hpp"

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
  if (config.dynamic) {
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

}  // namespace troupe
