#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/checkpoint/checkpoint.hpp"

namespace troupe::core {

/// Saves numbered checkpoints `<prefix>-<step>.tckpt` into a directory, keeps the
/// `max_to_keep` written last (all when <= 0), and finds the newest one that restores
/// cleanly. "Newest" is by write order, so a directory reused by a run whose steps start
/// over keeps that run's checkpoints and ages out the earlier run's.
///
///   CheckpointManager m("/tmp/run/ckpt", /*max_to_keep=*/3);
///   m.save(ckpt, step);
///   auto [step, restored] = m.restore_latest().value();
class CheckpointManager {
 public:
  explicit CheckpointManager(std::string directory, int max_to_keep = 5,
                             std::string prefix = "ckpt");

  /// Writes the checkpoint for `step` (creating the directory), then deletes the oldest
  /// beyond max_to_keep and the temporaries of writers killed mid-write
  /// (remove_abandoned_writes). Returns the path written.
  Expected<std::string> save(const Checkpoint& ckpt, int64_t step);
  /// (step, path) of every checkpoint in the directory, in the order they were written
  /// (modification time; equal times by step), oldest first. Temporary files of writes in
  /// progress are not checkpoints.
  std::vector<std::pair<int64_t, std::string>> checkpoints() const;
  /// The path of the newest checkpoint, if any.
  std::optional<std::string> latest() const;
  /// The newest checkpoint that reads cleanly (and that `accept`, where given, takes) and
  /// its step. Damaged newer ones, and those `accept` refused, are left on disk and reported
  /// in `skipped`, each naming its file. not_found when there is no checkpoint at all;
  /// data_loss, naming the newest, when there are some and none reads and is taken.
  Expected<std::pair<int64_t, Checkpoint>> restore_latest(
      std::vector<Error>* skipped = nullptr,
      const std::function<Status(const Checkpoint&)>& accept = {}) const;

  const std::string& directory() const { return directory_; }

 private:
  std::string directory_;
  int max_to_keep_;
  std::string prefix_;
};

}  // namespace troupe::core
