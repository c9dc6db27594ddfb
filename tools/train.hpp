#pragma once

// `troupe train`: a Keras model file as a Troupe job. In one process without TF_CONFIG, or
// as the program of every task under `troupe launch`, Slurm or TFJob. With PS tasks
// (ParameterServerStrategy) the PS and worker tasks serve the generic Keras steps (the model
// reaches them from the chief, as data) and the chief trains; without them
// (MultiWorkerMirroredStrategy) every worker trains a replica. The chief writes the trained
// model as a .keras file Keras loads.

#include <cstdint>
#include <string>
#include <vector>

#include "core/partitioner.hpp"

namespace CLI {
class App;
}

namespace troupe::tools {

struct TrainOptions {
  std::string model;                // a .keras file, or a to_json() document
  std::vector<std::string> data;    // files, or a directory (every file in it)
  std::string format;               // tfrecord | criteo | idx | csv; default by the files' names
  std::vector<std::string> labels;  // "COLUMN" (one output) or "OUTPUT=COLUMN"
  int64_t batch = 32;
  int64_t epochs = 1;
  int64_t steps = 0;  // per epoch; 0: one pass (one process only)
  std::vector<std::string> validation;
  std::string device = "cpu";
  std::string precision = "float32";
  std::string out;        // the trained model (.keras)
  std::string model_dir;  // checkpoints and the backup (default: the run directory)
  std::vector<std::string> dynamic_tables;  // Embedding layers kept as dynamic tables
  int64_t dynamic_max_rows = 0;
  int64_t shuffle = 0;
  uint64_t seed = 1;
  int ps_replicas = 1;
  core::RowLayout shard_rows = core::RowLayout::range;  // --shard-rows
  int steps_per_execution = 1;
  bool elastic = false;  // mirrored: re-form without a lost worker
  int64_t evaluator_timeout_s =
      600;              // the evaluator task: idle this long after the last checkpoint
  std::string compile;  // a compile_config (JSON) instead of the file's
};

/// Adds the subcommand's options to `app`.
void add_train_options(CLI::App& app, TrainOptions& o);
/// Runs it in this process's role; returns the exit status after the final JSON line.
int run_train(TrainOptions o);

}  // namespace troupe::tools
