#pragma once
// A node's settings, without CAF: the public troupe/troupe.hpp includes this, so that a
// job's own code does not compile CAF's headers (net/node.hpp applies them to CAF).

#include <chrono>
#include <cstddef>
#include <string>

#include "net/wire_dtype.hpp"

namespace troupe::net {

/// Settings every Troupe node uses. Heartbeats must be on at both ends of every
/// connection: a node that times out idle peers but sends no heartbeats itself would drop
/// healthy peers (measured, ../shared/notes/caf-0.17.md).
struct NodeOptions {
  std::chrono::milliseconds heartbeat_interval{100};
  std::chrono::milliseconds connection_timeout{1000};
  /// CAF's scheduler threads per process. Several Troupe processes share a machine's cores,
  /// and CAF's default (max(cores, 4) threads, work stealing with busy polling) has idle
  /// threads spin against the threads doing work.
  size_t scheduler_threads = 1;
  /// "sharing" (threads sleep on a condition variable when idle) or "stealing".
  std::string scheduler_policy = "sharing";
  /// Tensor bytes of pulls and pushes go through the tensor channel (net/channel.hpp); off,
  /// they go as CAF messages. A PS task with it off announces no channel, and workers then
  /// use CAF messages for it.
  bool tensor_channel = true;
  /// Worker tasks: the tensor channel's type for pulled values and pushed gradients
  /// (actors::WorkerOptions::wire_dtype).
  WireDtype wire_dtype = WireDtype::float32;
  /// Worker tasks: bound on building a dataset and on each request for its batches
  /// (actors::WorkerOptions::dataset_timeout).
  std::chrono::milliseconds dataset_timeout{600000};
  /// PS tasks: snapshot every shard into `<ps_snapshot_dir>/ps-<index>` every
  /// `ps_snapshot_interval` in which updates were applied, and on start restore the newest
  /// readable snapshot found there (a restarted PS carries on from it). Empty: off.
  std::string ps_snapshot_dir;
  std::chrono::milliseconds ps_snapshot_interval{1000};
  /// PS tasks: one snapshot in this many is full, the others deltas holding only the rows
  /// of dynamic tables changed since the snapshot before (other shards whole); a restart
  /// restores the newest full snapshot and the deltas after it. 1: every snapshot full.
  int ps_snapshot_full_every = 1;
  /// Worker tasks: a worker actor that fails is restarted in its process (and published on
  /// the task's port again) at most this many times in any `restart_period`; one more and
  /// the process gives up with an error (its own restart is then the launcher's or the
  /// orchestrator's).
  int restart_intensity = 3;
  std::chrono::milliseconds restart_period{5000};
};

}  // namespace troupe::net
