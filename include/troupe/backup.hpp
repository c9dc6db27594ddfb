#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "core/expected.hpp"

namespace troupe {

class ParameterServerStrategy;

/// Where training stands: what a restarted chief resumes from.
struct TrainingState {
  int64_t epoch = 0;
  int64_t step = 0;  // closures (or steps, as the program counts them) done
};

/// TensorFlow's BackupAndRestore for a chief: backs up every variable of the strategy,
/// their optimizer slots and iteration counts, and the epoch/step counters into a
/// directory; a chief restarted after a failure restores them onto the PS tasks and
/// resumes from the saved step.
///
///   auto backup = BackupAndRestore::make(*strategy, "/ckpt/backup").value();
///   // ... create the variables ...
///   TrainingState at = backup->restore().value().value_or(TrainingState{});
///   CoordinatorOptions o;
///   o.incarnation = backup->incarnation();  // new closure ids for this chief
///   ...
///   coord->join();                            // a consistent point
///   backup->backup({epoch, step});
///   ...
///   backup->finish();                         // trained: the backup is removed
///
/// Each backup is a checkpoint file (CRC-checked, written atomically); the newest two are
/// kept, and a damaged newest one falls back to the one before. Every chief that opens the
/// directory takes the next incarnation number (stored there too), so the closure ids of a
/// restarted chief never repeat ones the PS shards applied for an earlier chief.
class BackupAndRestore {
 public:
  struct Options {
    int max_to_keep = 2;
    /// Names an older backup may hold a variable under, by the variable's name now: a
    /// shard without a value of its own name is restored from the former one (same shape,
    /// slots and optimizer). The built-in CTR model's Keras form takes the programs' names
    /// so (core::keras::ctr_former_names), as a ModelSpec::ctr job backed them up.
    std::map<std::string, std::string> former_names;
  };

  /// Opens (creating) `directory` and takes this chief's incarnation. An unreadable
  /// incarnation record is a data_loss error naming it; nothing is deleted.
  static core::Expected<std::unique_ptr<BackupAndRestore>> make(ParameterServerStrategy& strategy,
                                                                std::string directory,
                                                                Options options);
  static core::Expected<std::unique_ptr<BackupAndRestore>> make(ParameterServerStrategy& strategy,
                                                                std::string directory) {
    return make(strategy, std::move(directory), Options{});
  }
  ~BackupAndRestore();

  /// 1 for the first chief on this directory, then one more for each restart.
  uint32_t incarnation() const { return incarnation_; }

  /// With a backup in the directory: writes its values, optimizer slots and iteration
  /// counts to every variable created so far (create them first) and returns its counters;
  /// nullopt when there is none. A backup that does not match the variables (one missing,
  /// an extra one, another shape) is an invalid_argument error naming it, and nothing is
  /// written to the PS tasks.
  core::Expected<std::optional<TrainingState>> restore();

  /// Saves every variable's shards with their slots, and `state`. Call it where no closure
  /// is in flight (after join()), so that the backup is one consistent point of training.
  core::Status backup(const TrainingState& state);

  /// Training is over: removes the backups and the incarnation record (TensorFlow deletes
  /// its backup at the end of fit()).
  core::Status finish();

  const std::string& directory() const { return directory_; }

 private:
  BackupAndRestore(ParameterServerStrategy& strategy, std::string directory, Options options,
                   uint32_t incarnation);

  ParameterServerStrategy& strategy_;
  std::string directory_;
  Options options_;
  uint32_t incarnation_;
};

}  // namespace troupe
