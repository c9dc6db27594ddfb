#pragma once

#include <chrono>
#include <optional>

#include <chrono>
#include <memory>
#include <string>

#include <caf/all.hpp>

#include "actors/ps_shard_state.hpp"

namespace troupe::actors {

struct PsShardOptions {
  /// The state to start from (a restored snapshot); null: empty.
  std::shared_ptr<PsShardState> initial;
  /// Where snapshots go (a CheckpointManager directory); empty: none are taken.
  std::string snapshot_dir;
  std::chrono::milliseconds snapshot_interval{1000};
};

struct PsShardActorState {
  PsShardState shard;
  int32_t channel_port = 0;  // the tensor channel's port on this host; 0: none
  PsShardOptions options;
  int64_t snapshotted_updates = -1;    // updates_applied at the last snapshot
  int64_t snapshotted_variables = -1;  // and the variables the shard held then
  int64_t snapshots = 0;
  bool snapshot_failed = false;  // reported once on stderr per run of failures
  int64_t snapshot_failures = 0;
  std::optional<std::chrono::steady_clock::time_point> last_snapshot;  // newest written
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
///   (channel)                                       -> int32 port of the tensor channel
///   (channel, int32 port)                           -> (sets it; sent by serve())
///   (stats)                                         -> [variables, pulls, applied,
///                                                      duplicate, rejected, restored
///                                                      from (-1: not restored), snapshots]
///   (shutdown)                                      -> the actor quits
/// Bad requests get an error reply; the actor keeps serving. With a snapshot directory it
/// writes a snapshot every interval in which updates were applied (on its own thread:
/// requests wait for the write), keeping the newest two.
caf::behavior ps_shard(caf::stateful_actor<PsShardActorState>* self, PsShardOptions options);

}  // namespace troupe::actors
