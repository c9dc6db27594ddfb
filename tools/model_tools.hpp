#pragma once

// troupe export and troupe predict: a servable model from a job's PS snapshots or from its
// live PS tasks, and scoring data with it.

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace troupe::tools {

struct ExportOptions {
  /// A PS snapshot directory as ctr_ps was given it (--ps-snapshot-dir): ctr_model.json and
  /// one ps-<task> folder a PS task, each restored as a restarted task would restore it.
  std::string checkpoint;
  /// Or a running job's run directory (troupe launch --run-dir): its tasks.json names the PS
  /// tasks, which are read live, with its cluster-secret unless the environment gives one.
  std::string job;
  /// The model's ctr_model.json; default: the one in `checkpoint` or `job`.
  std::string config;
  /// With `job`: how long to keep trying each PS task.
  int64_t connect_timeout_ms = 10000;
  std::string out;
  std::string table_variable = "embedding";
  /// A dynamic table: only rows whose key occurred at least this often (0: every row).
  int64_t min_count = 0;
  bool bf16 = false;  // the table's rows in bfloat16 (half the bytes)
};

/// Writes the export; the result's JSON line, and `code` the exit code.
nlohmann::json run_export(const ExportOptions& options, int& code);

struct PredictOptions {
  std::string model;
  std::string data;    // a file, or a stream ("-", a FIFO)
  std::string format;  // CTR models: criteo by default; Keras models: by the files' names
  int64_t batch = 256;
  /// Examples scored one at a time first, for latency percentiles (0: none).
  int64_t latency_samples = 0;
  /// A Keras model: write every output's predictions here (JSON: by output name, its shape
  /// and values).
  std::string predictions;
};

/// Scores the data: examples, AUC and log loss against its labels, examples/s; with
/// latency_samples, batch-1 latency p50/p99.
nlohmann::json run_predict(const PredictOptions& options, int& code);

/// Whether `path` is a Keras model file (a .keras zip, or a .json model description).
bool is_keras_model(const std::string& path);
/// run_predict for a Keras model: its compiled metrics where the data has its labels
/// (tfrecord, criteo, csv or idx data by the model's input names), examples/s, latency.
nlohmann::json run_keras_predict(const PredictOptions& options, int& code);

}  // namespace troupe::tools
