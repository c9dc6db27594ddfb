#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/expected.hpp"
#include "troupe/coordinator_types.hpp"
#include "troupe/mirrored_strategy.hpp"
#include "troupe/model.hpp"

namespace troupe {

class ParameterServerStrategy;
class Registry;

/// Metrics by name: "loss", "accuracy", "val_loss", "val_accuracy", "examples_per_sec".
using Logs = std::map<std::string, double>;

/// A dataset function registered by name (TensorFlow's DatasetCreator): each worker, or
/// the single process, builds its own iterator from it with its InputContext.
struct DatasetCreator {
  const Registry* registry = nullptr;
  std::string name;
  /// Arguments for a dataset function registered with Registry::add_dataset_with_args,
  /// sent to every worker with the dataset's creation.
  std::vector<char> args{};
};

struct FitOptions {
  int64_t epochs = 1;
  /// Steps (batches) per epoch. Required with a ParameterServerStrategy (as in
  /// TensorFlow: its per-worker datasets repeat); in one process, 0 means one pass over
  /// the data each epoch, and with a MultiWorkerMirroredStrategy one pass over each
  /// replica's shard, ending at the first step where some shard has no batch left.
  int64_t steps_per_epoch = 0;
  /// PS: steps each closure runs on its worker (one round trip to the coordinator for that
  /// many steps). Training logs then sample the last step of each closure.
  int steps_per_execution = 1;
  enum class Validation {
    none,
    direct,       // the chief (or the single process; mirrored: every replica) evaluates
    distributed,  // evaluation batches run on the workers: as closures (PS), or each
                  // replica its share, the sums all-reduced (mirrored)
  };
  Validation validation = Validation::none;
  /// Evaluate after every this many epochs (and always after the last).
  int64_t validation_freq = 1;
  /// PS: the options of the coordinator fit() makes on the model's first fit.
  CoordinatorOptions coordinator;
};

/// How fit() runs the steps.
enum class FitStrategy {
  local,             // in this process
  parameter_server,  // as closures on the workers of a ParameterServerStrategy (the chief)
  mirrored,          // as one replica of a MultiWorkerMirroredStrategy (every worker)
};

/// Where training stands, as callbacks see it.
struct FitState {
  Model* model = nullptr;
  const FitOptions* options = nullptr;
  FitStrategy strategy = FitStrategy::local;
  /// Whether this process writes what the job keeps (checkpoints, backups, summaries,
  /// logs): false on a mirrored replica other than the chief, where the built-in
  /// callbacks write nothing.
  bool is_chief = true;
  int64_t epoch = 0;            // the current (0-based) epoch
  int64_t step = 0;             // steps (batches) done in all, including resumed ones
  int64_t steps_per_epoch = 0;  // 0: unknown until the data ends (one process)
  /// Where this fit() began: set by a callback's on_train_begin (BackupAndRestore).
  int64_t initial_epoch = 0;
  int64_t initial_step = 0;
  /// A callback sets this to end training after the current epoch.
  bool stop_training = false;
  /// PS, during on_train_begin of the model's first fit: the coordinator's options.
  CoordinatorOptions* coordinator_options = nullptr;
};

/// What fit() reports as it goes, for progress displays: after every step in one process
/// or on a mirrored replica (the global batch's figures), after every finished closure with
/// a PS strategy (no synchronisation).
struct Progress {
  int64_t step = 0;         // steps done in all
  int64_t epoch_step = 0;   // steps done in this epoch
  int64_t examples = 0;     // examples trained on in this fit()
  double loss = 0.0;        // the latest batch's loss
  double epoch_loss = 0.0;  // the epoch's mean loss so far (Keras's running value)
  double elapsed_s = 0.0;   // since this epoch began
  double examples_per_sec = 0.0;
};

/// Keras's callback interface. An error returned from any hook ends fit() with it.
/// Batch-level hooks run after every batch_interval() steps, with the epoch's metrics so
/// far as their logs (as Keras's); with a PS strategy fit() waits
/// there for every closure scheduled so far (a consistent point: no closure in flight).
/// Mirrored: every replica runs the callbacks with the same logs; after the batch- and
/// epoch-level hooks the replicas agree, so an error or stop_training on any one of them
/// ends (or stops) fit() on all.
class Callback {
 public:
  virtual ~Callback() = default;
  virtual core::Status on_train_begin(FitState&) { return {}; }
  virtual core::Status on_epoch_begin(FitState&) { return {}; }
  virtual core::Status on_train_batch_end(FitState&, const Logs&) { return {}; }
  virtual core::Status on_epoch_end(FitState&, const Logs&) { return {}; }
  virtual core::Status on_train_end(FitState&, const Logs&) { return {}; }
  virtual void on_progress(const FitState&, const Progress&) {}
  /// Batch-level calls wanted every this many steps (0: none). With a PS strategy fit()
  /// synchronises at the smallest such interval of its callbacks.
  virtual int64_t batch_interval() const { return 0; }
  /// Whether on_train_batch_end reads its logs: when no callback called at a point does,
  /// fit() passes empty logs there instead of computing the metrics (a callback that only
  /// wants the point, as Python's check for Ctrl-C).
  virtual bool reads_batch_logs() const { return true; }
};

using Callbacks = std::vector<std::shared_ptr<Callback>>;

/// What fit() did: each epoch's logs (training metrics and, when evaluated, val_*).
struct History {
  std::vector<Logs> epochs;  // one per epoch run in this call
  int64_t initial_epoch = 0;
  int64_t initial_step = 0;  // resumed from (BackupAndRestore)
  int64_t steps = 0;         // steps done in all at the end
  int64_t steps_run = 0;     // steps run by this call
  bool stopped_early = false;
  double train_s = 0.0;
  CoordinatorStats stats;  // PS
  MirroredStats mirrored;  // mirrored: re-formings, workers lost and joined
};

/// Keras's Model.fit in one process (the default strategy): trains the model's local
/// layers with its optimizer; batch-level callbacks after every step.
core::Expected<History> fit(Model& model, const DatasetCreator& data, const FitOptions& options,
                            const Callbacks& callbacks = {});

/// Model.fit with a ParameterServerStrategy: the model's variables live on the PS tasks
/// (attached here if not yet), every step is a "<name>/train" closure on some worker
/// (register_model() in every process), and epoch-level callbacks run on the chief between
/// epochs, after every closure of the epoch has finished. Lost workers, retries and PS
/// recovery are the coordinator's (see CoordinatorOptions).
core::Expected<History> fit(Model& model, ParameterServerStrategy& strategy,
                            const DatasetCreator& data, const FitOptions& options,
                            const Callbacks& callbacks = {});

/// Model.fit with a MultiWorkerMirroredStrategy, called by every worker: the model's layers
/// and optimizer slots are mirrored (the chief's values, or its BackupAndRestore backup,
/// broadcast at the start), each replica builds its shard of the data from the dataset
/// function with the strategy's InputContext (a fresh iterator every epoch; a resumed or
/// re-formed epoch skips the steps done), the gradients and the step's metrics are
/// all-reduced every step, and the logs every replica sees are the global batch's. The
/// built-in callbacks write from the chief only. Elastic: a worker lost mid-step is left
/// behind (the step is run again); a process that joins the running job enters fit() with
/// the others' state, epoch and step.
core::Expected<History> fit(Model& model, MultiWorkerMirroredStrategy& strategy,
                            const DatasetCreator& data, const FitOptions& options,
                            const Callbacks& callbacks = {});

}  // namespace troupe
