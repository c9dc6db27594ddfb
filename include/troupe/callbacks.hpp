#pragma once

#include <chrono>
#include <cstdint>
#include <fstream>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>

#include "core/checkpoint/checkpoint_manager.hpp"
#include "core/summary/event_writer.hpp"
#include "troupe/fit.hpp"

namespace troupe {
class BackupAndRestore;
}

/// Keras's built-in callbacks, for fit().
namespace troupe::callbacks {

/// The name of the file ModelCheckpoint writes at the end of training, next to the
/// checkpoints: JSON {"step": N, "path": "..."} naming the last checkpoint. The side-car
/// evaluator stops once it has evaluated that one.
inline constexpr const char* final_marker = "final.json";

/// "min" for metrics whose name contains "loss", "max" otherwise (Keras's "auto").
bool lower_is_better(const std::string& metric);

/// Saves the model's weights (read from the PS tasks when distributed) as checkpoints
/// `<directory>/ckpt-<step>.tckpt` (ints "step" and "epoch" with them), after every epoch
/// or every save_freq_steps steps, keeping the newest max_to_keep. With save_best_only,
/// only when `monitor` improved. At the end of training it writes the final marker.
class ModelCheckpoint : public Callback {
 public:
  struct Options {
    int max_to_keep = 5;
    int64_t save_freq_steps = 0;  // 0: every epoch
    bool save_best_only = false;
    std::string monitor = "val_loss";
  };
  ModelCheckpoint(std::string directory, Options options);
  explicit ModelCheckpoint(std::string directory) : ModelCheckpoint(std::move(directory), {}) {}

  core::Status on_train_begin(FitState& s) override;
  core::Status on_train_batch_end(FitState& s, const Logs& logs) override;
  core::Status on_epoch_end(FitState& s, const Logs& logs) override;
  core::Status on_train_end(FitState& s, const Logs& logs) override;
  int64_t batch_interval() const override { return options_.save_freq_steps; }

  /// The checkpoints written by this callback, in order.
  int64_t saves() const { return saves_; }

 private:
  core::Status save(FitState& s, const Logs& logs);
  core::CheckpointManager manager_;
  Options options_;
  std::optional<double> best_;
  int64_t saves_ = 0;
  int64_t last_step_ = -1;
  std::string last_path_;
};

/// Keras's BackupAndRestore: backs up the training state (weights, optimizer slots and
/// iteration counts, epoch and step) into `directory` at every epoch end (or every
/// save_freq_steps steps); a fit() that finds a backup there (its chief was killed and
/// restarted) restores it and resumes at the saved epoch and step. Removed when training
/// ends. With a ParameterServerStrategy this is troupe::BackupAndRestore (it also gives
/// the restarted chief a new closure-id incarnation), so it must be given to the model's
/// first fit().
class BackupAndRestoreCallback : public Callback {
 public:
  struct Options {
    int64_t save_freq_steps = 0;  // 0: every epoch
  };
  BackupAndRestoreCallback(std::string directory, Options options);
  explicit BackupAndRestoreCallback(std::string directory)
      : BackupAndRestoreCallback(std::move(directory), {}) {}
  ~BackupAndRestoreCallback() override;

  core::Status on_train_begin(FitState& s) override;
  core::Status on_train_batch_end(FitState& s, const Logs& logs) override;
  core::Status on_epoch_end(FitState& s, const Logs& logs) override;
  core::Status on_train_end(FitState& s, const Logs& logs) override;
  int64_t batch_interval() const override { return options_.save_freq_steps; }

  int64_t backups() const { return backups_; }
  /// Whether this fit() resumed from a backup.
  bool resumed() const { return resumed_; }

 private:
  core::Status save(FitState& s, int64_t epoch);
  std::string directory_;
  Options options_;
  std::unique_ptr<BackupAndRestore> ps_;  // distributed
  int64_t backups_ = 0;
  bool resumed_ = false;
};

/// TensorBoard summaries: `<logdir>/train` gets epoch_loss, epoch_accuracy and
/// epoch_examples_per_sec at every epoch end (step = epoch), and batch_loss every
/// update_freq_steps steps (step = global step; 0: none); `<logdir>/validation` gets the
/// val_ metrics without their prefix.
class TensorBoard : public Callback {
 public:
  struct Options {
    int64_t update_freq_steps = 0;
  };
  TensorBoard(std::string logdir, Options options);
  explicit TensorBoard(std::string logdir) : TensorBoard(std::move(logdir), {}) {}

  core::Status on_train_batch_end(FitState& s, const Logs& logs) override;
  core::Status on_epoch_end(FitState& s, const Logs& logs) override;
  int64_t batch_interval() const override { return options_.update_freq_steps; }

  const core::EventFileWriter& train_writer() const { return train_; }
  const core::EventFileWriter& validation_writer() const { return validation_; }

 private:
  Options options_;
  core::EventFileWriter train_, validation_;
};

/// A JSONL file for scripts: one object per epoch ({"event": "epoch", "epoch", "step",
/// "wall_time", and every log}), appended, flushed per line.
class MetricsLog : public Callback {
 public:
  explicit MetricsLog(std::string path);
  core::Status on_epoch_end(FitState& s, const Logs& logs) override;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::ofstream out_;
};

/// Stops training when `monitor` has not improved by more than min_delta for `patience`
/// epochs in a row (mode "auto" as lower_is_better()). A metric missing from the logs is a
/// warning on stderr, once, and never stops training.
class EarlyStopping : public Callback {
 public:
  struct Options {
    std::string monitor = "val_loss";
    double min_delta = 0.0;
    int64_t patience = 0;
  };
  explicit EarlyStopping(Options options);
  EarlyStopping() : EarlyStopping(Options{}) {}

  core::Status on_train_begin(FitState& s) override;
  core::Status on_epoch_end(FitState& s, const Logs& logs) override;

  /// The epoch after which training was stopped, if it was.
  std::optional<int64_t> stopped_epoch() const { return stopped_epoch_; }
  std::optional<double> best() const { return best_; }

 private:
  Options options_;
  std::optional<double> best_;
  int64_t wait_ = 0;
  std::optional<int64_t> stopped_epoch_;
  bool warned_ = false;
};

/// A progress display: on a terminal, one live line (epoch, step/steps, a bar,
/// examples/s, loss, ETA) redrawn at most every 100 ms (or `interval`, if shorter);
/// otherwise plain lines every `interval`. A summary line at each epoch end either way.
/// Style keras_bar draws Keras's fit(verbose=1) instead: "Epoch 1/3", then
/// "37/100 ━━━━━━━───── 2s 5ms/step - loss: 0.4120" live on a terminal (nothing live
/// otherwise) and the epoch's line with every log ("- accuracy: 0.8123 - loss: …");
/// keras_epoch Keras's verbose=2: "Epoch 1/3" and "100/100 - 1s - 5ms/step - …" per epoch.
class ProgressDisplay : public Callback {
 public:
  enum class Style { troupe, keras_bar, keras_epoch };
  struct Options {
    std::chrono::milliseconds interval{10000};  // plain lines
    std::optional<bool> terminal;               // default: whether the stream is a tty
    Style style = Style::troupe;
  };
  ProgressDisplay(std::ostream& out, Options options);
  ProgressDisplay();  // to stderr

  core::Status on_epoch_begin(FitState& s) override;
  void on_progress(const FitState& s, const Progress& p) override;
  core::Status on_epoch_end(FitState& s, const Logs& logs) override;

 private:
  std::ostream& out_;
  Options options_;
  bool terminal_;
  void keras_live(const FitState& s, const Progress& p);
  core::Status keras_epoch_end(FitState& s, const Logs& logs);
  std::chrono::steady_clock::time_point last_;
  bool drawn_ = false;
  int64_t epoch_steps_ = 0;  // steps done in this epoch, as on_progress last told
};

}  // namespace troupe::callbacks
