#pragma once

// What the CTR examples (ctr_ps, ctr_fit) share about a ctr_datagen directory: its training
// files, its teacher's figures, and the per-worker input pipeline over them.

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/data/sparse_input.hpp"

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

/// A worker's batches of the directory's training files (core::sparse_input). No file is
/// a not_found error, thrown (BadExpectedAccess) so that the dataset fails with it.
inline core::Dataset<core::Batch> ctr_train_batches(const std::string& dir, const std::string& ext,
                                                    const core::InputContext& ctx,
                                                    const core::SparseInputOptions& options) {
  auto files = ctr_train_files(dir, ext);
  if (files.empty())
    core::Expected<int>(
        core::make_error(core::Errc::not_found, dir + ": no train-*" + ext + " files"))
        .value();
  return core::sparse_input(std::move(files), ctx, options);
}

}  // namespace troupe::examples
