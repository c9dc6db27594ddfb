#pragma once

#include <atomic>
#include <memory>
#include <thread>

#include <chrono>
#include <optional>

#include <chrono>
#include <memory>
#include <string>

#include <caf/all.hpp>

#include "actors/shared_shard.hpp"

namespace troupe::actors {

struct PsShardOptions {
  /// The state to start from (a restored snapshot); null: empty.
  std::shared_ptr<PsShardState> initial;
  /// The shards as the task's tensor channel shares them (its threads serve pulls from
  /// them directly); null: the actor keeps them to itself.
  std::shared_ptr<SharedShard> shared;
  /// Where snapshots go (a CheckpointManager directory); empty: none are taken.
  std::string snapshot_dir;
  std::chrono::milliseconds snapshot_interval{1000};
  /// One snapshot in this many is full; the others are deltas (the rows of dynamic tables
  /// changed since the previous snapshot, other shards whole). 1: every one full.
  int snapshot_full_every = 1;
};

/// A snapshot being written on its own thread: the copy of the shard taken in the
/// actor's handler (consistent: between two requests) and the write's outcome.
struct SnapshotWrite {
  std::thread thread;
  std::atomic<bool> done{false};
  core::Status result;  // set by the thread before done
  std::chrono::steady_clock::time_point taken;
  int64_t updates = 0, variables = 0, number = 0, assigns = 0;
  bool delta = false;
  int64_t base = -1, index = 0;  // a delta: the full snapshot it follows, its place after it
  int64_t bytes = 0;             // of the file written
  ~SnapshotWrite() {
    if (thread.joinable()) thread.join();
  }
};

/// A snapshot being copied, one shard per turn of the actor (requests queued meanwhile are
/// served between two shards).
struct SnapshotBuild {
  std::shared_ptr<core::Checkpoint> copy = std::make_shared<core::Checkpoint>();
  std::vector<std::string> left;
  std::chrono::steady_clock::time_point taken;
  int64_t updates = 0, variables = 0, assigns = 0;
  int64_t longest_step_us = 0;
  bool delta = false;
};

struct PsShardActorState {
  /// The shards. Only the actor changes them, under the lock held exclusively; the actor's
  /// own reads need no lock (nothing else writes), the channel's take it shared.
  std::shared_ptr<SharedShard> shared = std::make_shared<SharedShard>();
  PsShardState& shard() { return shared->state; }
  const PsShardState& shard() const { return shared->state; }
  int32_t channel_port = 0;  // the tensor channel's port on this host; 0: none
  PsShardOptions options;
  int64_t snapshotted_updates = -1;    // updates_applied at the last snapshot
  int64_t snapshotted_variables = -1;  // and the variables the shard held then
  int64_t snapshots = 0;
  int64_t assigns = 0;  // shards overwritten (a backup put back): the next snapshot must see it
  bool snapshot_failed = false;  // reported once on stderr per run of failures
  int64_t snapshot_failures = 0;
  std::optional<std::chrono::steady_clock::time_point> last_snapshot;  // newest written
  std::unique_ptr<SnapshotBuild> building;  // a snapshot being copied, or none
  std::unique_ptr<SnapshotWrite> writing;   // at most one write at a time
  int64_t snapshot_copy_us = 0;             // the longest pause of serving for one shard's copy
  int64_t snapshot_write_ms = 0;            // and its write, off the actor's thread
  /// The chain of delta snapshots: the full snapshot deltas now follow (-1: none, the next
  /// must be full), and how many deltas follow it so far.
  int64_t chain_base = -1;
  int64_t chain_length = 0;
  int64_t snapshot_full_bytes = 0;   // the newest full snapshot's file
  int64_t snapshot_delta_bytes = 0;  // the newest delta's file
  int64_t snapshot_updates = -1;     // updates_applied in the newest snapshot written
  int64_t channel_refused = 0;       // strangers the tensor channel refused
  int64_t port_refused = 0;          // and the CAF port's gate
  int64_t bf16_requests = 0;         // requests whose tensors came as bf16
  /// Random per actor: a coordinator that sees the same value after a dropped connection
  /// knows nothing was lost; a restarted task (new state) has another.
  int64_t process = 0;
  static inline const char* name = "troupe.ps_shard";
};

/// The actor of one parameter-server task. Requests (atoms in net/wire.hpp):
///   (create, VariableDef)                           -> ok
///   (pull, name)                                    -> WireTensor
///   (pullrows, name, rows)                          -> WireTensor
///   (push, closure_id, name, WireTensor)            -> bool (false: duplicate, ignored)
///   (pushpull, closure_id, name, WireTensor)        -> WireTensor (value after the push)
///   (pushrows, closure_id, name, RowsUpdate)        -> bool
///   (psbatch, PsRequest)                            -> [PsItem], one per request item
///   (rowspage, name, from, limit, int32 min_count)  -> RowsPage (a dynamic table's rows)
///   (channel)                                       -> int32 port of the tensor channel
///   (channel, int32 port)                           -> (sets it; sent by serve())
///   (stats)                                         -> [variables, pulls, applied,
///                                                      duplicate, rejected, restored
///                                                      from (-1: not restored), snapshots]
///   (shutdown)                                      -> the actor quits
/// Pulls through the tensor channel are served by its threads from the shared shards
/// (actors/shared_shard.hpp), not by the actor. Bad requests get an error reply; the actor
/// keeps serving. With a snapshot directory it
/// snapshots every interval in which updates were applied, keeping the newest two: the
/// actor copies one shard per turn (requests are served between shards, so serving pauses
/// for one shard's memcpy at most: split big tables into several shards), then a thread of
/// its own writes the copy to disk while the actor serves on; a snapshot still being
/// written when the next interval comes delays that one. PS memory during a snapshot:
/// up to twice the shards.
/// With `snapshot_full_every` > 1, the snapshots between two full ones are deltas:
/// "delta-<full>-<k>.tckpt" beside "ps-<full>.tckpt", the k-th after that full one. A new full
/// snapshot removes the deltas of full snapshots no longer kept; a failed write makes the
/// next snapshot full (a delta must follow what is on disk).
caf::behavior ps_shard(caf::stateful_actor<PsShardActorState>* self, PsShardOptions options);

/// What restore_ps_snapshots() rebuilt.
struct PsRestore {
  std::shared_ptr<PsShardState> state;
  int64_t full = -1;   // the full snapshot's number
  int64_t deltas = 0;  // deltas applied after it
};

/// A PS task's state from its snapshot directory: the newest full snapshot that reads
/// cleanly, then the deltas written after it in order, up to the first that is missing,
/// damaged or inconsistent (the state is then as of the delta before it). nullopt when the
/// directory has no snapshot; an error naming the directory when none restores. Damaged
/// snapshots passed over (newer full ones, and the delta the chain stopped at: damaged,
/// inconsistent, or one missing before it) go to `skipped`, also when the result is an error.
core::Expected<std::optional<PsRestore>> restore_ps_snapshots(
    const std::string& dir, std::vector<core::Error>* skipped = nullptr);

}  // namespace troupe::actors
