#pragma once

// What the CTR examples (ctr_ps, ctr_fit) share about their training data: a ctr_datagen
// directory (its training files, its teacher's figures) or a stream, and the per-worker input
// pipeline over them.

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/data/sparse_input.hpp"
#include "core/nn/ctr_export.hpp"

namespace troupe::examples {

/// The directory's train-*<ext> files, sorted.
inline std::vector<std::string> ctr_train_files(const std::string& dir, const std::string& ext) {
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec))
    if (e.path().filename().string().rfind("train-", 0) == 0 && e.path().extension() == ext)
      files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  return files;
}

/// teacher.json's held-out AUC and log loss; -1 each when the file or a field is missing.
struct TeacherFigures {
  double auc = -1, logloss = -1;
};
inline TeacherFigures read_teacher(const std::string& dir) {
  std::ifstream meta(dir + "/teacher.json");
  auto j = nlohmann::json::parse(meta, nullptr, /*allow_exceptions=*/false);
  TeacherFigures t;
  if (!j.is_object()) return t;
  if (j.contains("teacher_auc") && j["teacher_auc"].is_number()) t.auc = j["teacher_auc"];
  if (j.contains("teacher_logloss") && j["teacher_logloss"].is_number())
    t.logloss = j["teacher_logloss"];
  return t;
}

/// Whether `data` names a training stream rather than a ctr_datagen directory: "-"
/// (standard input), or a path that is not a directory (a FIFO, as SageMaker's Pipe mode
/// feeds a job, or one file). "{worker}" in it stands for the worker's index.
inline bool ctr_is_stream(const std::string& data) {
  std::error_code ec;
  return data == "-" || !std::filesystem::is_directory(data, ec);
}

/// A stream source's path for one worker: "{worker}" replaced by its index. Several workers
/// cannot share one stream (each would get pieces of records): without "{worker}", more
/// than one worker is an invalid_argument error.
inline core::Expected<std::string> ctr_stream_path(const std::string& data, int64_t worker,
                                                   int64_t workers) {
  const auto at = data.find("{worker}");
  if (at == std::string::npos) {
    if (workers > 1)
      return core::make_error(core::Errc::invalid_argument,
                              core::record_source_name(data) + ": one stream cannot feed " +
                                  std::to_string(workers) +
                                  " workers; give each its own, e.g. /path/train-{worker}");
    return data;
  }
  std::string out = data;
  out.replace(at, 8, std::to_string(worker));
  return out;
}

/// A worker's batches of the training data: its share of a directory's training files
/// (core::sparse_input), or its own stream (ctr_is_stream). A stream, or a directory whose
/// training files are FIFOs, is read once (a stream cannot be repeated), and FIFOs need one
/// per worker. Errors (no file, streams too few) are thrown (BadExpectedAccess) so that the
/// dataset fails with them.
inline core::Dataset<core::Batch> ctr_train_batches(const std::string& data, const std::string& ext,
                                                    const core::InputContext& ctx,
                                                    core::SparseInputOptions options) {
  const int64_t workers = std::max<int64_t>(1, ctx.num_input_pipelines);
  if (ctr_is_stream(data)) {
    auto path = ctr_stream_path(data, ctx.input_pipeline_id, workers).value();
    options.epochs = 1;
    return core::sparse_input({std::move(path)}, core::InputContext{}, options);
  }
  auto files = ctr_train_files(data, ext);
  if (files.empty())
    core::Expected<int>(
        core::make_error(core::Errc::not_found, data + ": no train-*" + ext + " files"))
        .value();
  std::error_code ec;
  const bool fifos = std::any_of(files.begin(), files.end(), [&](const std::string& f) {
    return !std::filesystem::is_regular_file(f, ec);
  });
  if (fifos) {
    if (static_cast<int64_t>(files.size()) < workers)
      core::Expected<int>(core::make_error(core::Errc::invalid_argument,
                                           data + ": " + std::to_string(files.size()) +
                                               " training streams for " + std::to_string(workers) +
                                               " workers (each needs its own)"))
          .value();
    options.epochs = 1;
  }
  return core::sparse_input(std::move(files), ctx, options);
}

/// Writes `text` to `path` whole or not at all (a temporary file renamed over it); the
/// directory is created. An error names the path.
inline core::Status write_text_file(const std::string& path, const std::string& text) {
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    if (!out.flush()) return core::make_error(core::Errc::io_error, tmp + ": cannot write");
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) return core::make_error(core::Errc::io_error, path + ": " + ec.message());
  return {};
}

/// Writes ctr_model.json, what `troupe export` needs besides the variables: beside the PS
/// snapshots (`snapshot_dir`, for --checkpoint; none when empty) and in the run directory
/// under troupe launch ($TROUPE_RUN_DIR, for --job). An error names the file.
inline core::Status write_model_description(const core::CtrExportConfig& config,
                                            const std::string& snapshot_dir) {
  std::vector<std::string> dirs;
  if (!snapshot_dir.empty()) dirs.push_back(snapshot_dir);
  if (const char* run_dir = std::getenv("TROUPE_RUN_DIR")) dirs.emplace_back(run_dir);
  for (const auto& dir : dirs)
    if (auto st = write_text_file(dir + "/ctr_model.json", core::ctr_export_config_text(config));
        !st)
      return st;
  return {};
}

}  // namespace troupe::examples
