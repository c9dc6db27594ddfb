#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <map>
#include <string>

#include "core/expected.hpp"
#include "troupe/model.hpp"

namespace troupe {

struct SidecarEvaluatorOptions {
  /// Where the chief's ModelCheckpoint writes (ckpt-<step>.tckpt and the final marker).
  std::string checkpoint_dir;
  /// Summaries go to `<logdir>/eval` (event file, a tag evaluation_<name>_vs_iterations at
  /// the checkpoint's step for each value: loss, accuracy and auc, or a Keras model's
  /// compiled History names) and `<logdir>/eval/metrics.jsonl`; none when empty.
  std::string logdir;
  /// How often the directory is looked at while waiting for a new checkpoint.
  std::chrono::milliseconds poll_interval{200};
  /// Giving up: no new checkpoint (and no final marker) for this long is an
  /// unavailable error (the chief died for good, or never started).
  std::chrono::milliseconds idle_timeout{600000};
  /// Stop after this many evaluations (0: at the final checkpoint only).
  int64_t max_evaluations = 0;
  /// Called with a checkpoint's path just before it is read (tests use it to delete the
  /// file underneath the evaluator).
  std::function<void(const std::string&)> before_read;
  /// Asked at every look at the directory: when it says so, the evaluator stops there with
  /// a `cancelled` error (a process that saw Ctrl-C, say).
  std::function<bool()> stop;
};

struct SidecarResult {
  int64_t evaluations = 0;
  int64_t skipped = 0;  // checkpoints gone or unreadable when their turn came
  int64_t last_step = -1;
  BatchStats last;
  /// The last evaluation's values by name: a Keras model's compiled History names ("loss",
  /// "auc", "ctr_auc", ...); empty for the other models.
  std::map<std::string, double> last_logs;
};

/// TensorFlow's SidecarEvaluator: follows a checkpoint directory, restores the newest
/// checkpoint it has not evaluated into `model`'s local layers (a chief that saves faster
/// than it evaluates gets its intermediate checkpoints skipped, as TensorFlow's does),
/// evaluates it on the model's evaluation examples, writes summaries, and prints one JSON
/// line per checkpoint to `out` ({"checkpoint", "step", "epoch", "examples"} and the
/// values: "loss", "test_accuracy" and "auc" for the built-in models, a Keras model's
/// compiled History names for a Keras model). A checkpoint deleted (the chief keeps only
/// max_to_keep) or damaged between listing and reading is skipped with a warning on stderr, never
/// fatal. Returns after evaluating the checkpoint the final marker names. It reads files only: it
/// never connects to the training cluster.
core::Expected<SidecarResult> run_sidecar_evaluator(Model& model,
                                                    const SidecarEvaluatorOptions& options,
                                                    std::ostream& out);

}  // namespace troupe
