#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace troupe {

/// What the watchdog found when no closure had finished for `watchdog_timeout`: what is
/// queued and what is in flight where (TensorFlow's watchdog dumps thread stacks instead).
struct WatchdogReport {
  struct Closure {
    uint64_t id = 0;
    std::string step;
    std::chrono::milliseconds age{0};  // since it was sent to the worker
  };
  struct Worker {
    int index = 0;
    bool alive = true;
    std::vector<Closure> in_flight;  // oldest first
  };
  std::chrono::milliseconds since_progress{0};  // since the last closure finished
  size_t queued = 0;
  std::vector<Worker> workers;
  std::vector<int> ps_down;  // PS tasks being waited for (PS recovery)

  /// One line: "no closure finished for 1203 ms; 4 queued; worker:0 (alive): #17 slow
  /// (1190 ms), ...".
  std::string to_string() const;
};

/// How a ClusterCoordinator dispatches closures and handles lost workers and PS tasks.
struct CoordinatorOptions {
  /// A closure not finished within this time of its worker starting it is taken back and
  /// run elsewhere (the worker counts as lost). Time spent waiting behind other closures
  /// in the worker's mailbox does not count. A worker's first closure on a connection
  /// (its first requests to the PS tasks, made while the whole job starts) counts from
  /// its start or from the last first closure any worker answered, whichever is later.
  std::chrono::milliseconds closure_timeout{60000};
  /// Closures sent ahead to each worker: they wait in its mailbox rather than a round trip
  /// away. Only once every live worker has one does any worker get a second, so no closure
  /// waits behind another while a worker is idle. 1 gives TensorFlow's one-at-a-time
  /// dispatch.
  size_t max_in_flight_per_worker = 8;
  /// Bound on closures scheduled and not yet settled; schedule() waits for room
  /// (back-pressure). 0: unbounded.
  size_t max_pending_closures = 0;
  /// A closure whose worker is lost while running it this many times fails with
  /// `internal` (and ends the job as any error does, with a permanent exit code) instead
  /// of taking down worker after worker: a step that crashes its process is an error, not
  /// a retry loop.
  int max_closure_losses = 3;
  /// How often a lost worker's address is tried again; when a worker answers there
  /// (restarted, or resumed after a hang) it rejoins: it gets the variable placement,
  /// rebuilds every per-worker dataset and takes closures again.
  std::chrono::milliseconds rejoin_interval{100};
  /// The PS tasks snapshot their shards (net::NodeOptions::ps_snapshot_dir) and are
  /// restarted when they fail (troupe launch --restart-failed, or an orchestrator): when
  /// one goes down, dispatch pauses and closures that needed it run again once it is back,
  /// restored from its snapshot (TensorFlow fails the job here). If it is not back within
  /// `ps_restore_deadline`, join() raises `unavailable` naming it.
  bool ps_recovery = false;
  std::chrono::milliseconds ps_restore_deadline{30000};
  /// With replicated shards, each PS task serves workers only while its lease from the
  /// chief (renewed every `rejoin_interval`) holds: one cut off from the chief stops
  /// serving before the chief fails it over, so a worker that has not heard of the
  /// failover cannot read a value older than the promoted copy's. Keep it below the
  /// heartbeat timeout (net::NodeOptions::connection_timeout, 1 s) and well above
  /// `rejoin_interval`.
  std::chrono::milliseconds ps_lease{750};
  /// When closures are pending and none has finished for this long, the watchdog reports
  /// what is in flight where (and again after each further period without progress).
  /// Zero turns it off.
  std::chrono::milliseconds watchdog_timeout{0};
  /// Receives each report, on the coordinator's thread (keep it short); when empty, the
  /// report is printed to stderr.
  std::function<void(const WatchdogReport&)> on_watchdog;
  /// Closure ids are (incarnation << 32) + n. A chief restarted against PS tasks that kept
  /// running must use a new incarnation, or the shards would take its closures for ones
  /// they applied before and ignore their updates. 0 (the default) draws a fresh one per
  /// coordinator; BackupAndRestore hands out its own.
  uint32_t incarnation = 0;
};

/// A worker loss as the coordinator saw it: which worker, and when (ms since the Unix
/// epoch, so that a launcher's record of a kill on the same host can be set against it).
struct WorkerLoss {
  int64_t worker = 0;
  int64_t unix_ms = 0;
};

/// What a ClusterCoordinator has done so far (TensorFlow has no such counters).
struct CoordinatorStats {
  int64_t scheduled = 0;     // closures scheduled
  int64_t completed = 0;     // closures whose RemoteValue got a result
  int64_t failed = 0;        // closures that raised an application error
  int64_t cancelled = 0;     // closures cancelled by another closure's error
  int64_t retried = 0;       // closures taken back from a lost worker and queued again
  int64_t workers_lost = 0;  // times a worker was lost (down, hung, or silent)
  /// Each loss counted in workers_lost, oldest first (the first 10,000).
  std::vector<WorkerLoss> worker_losses;
  int64_t worker_rejoins = 0;  // times a lost worker came back and took closures again
  int64_t ps_restores = 0;     // times a PS task came back restored from its snapshot
  /// Times a PS task's connection dropped (a stall, a cut link) and the same process
  /// answered again: nothing was lost, nothing restored.
  int64_t ps_reconnects = 0;
  /// Updates the restored PS tasks had applied after their snapshot (lost with them), as
  /// far as the coordinator saw: it polls each PS's count every rejoin interval, so updates
  /// of the last interval before a failure are not counted.
  int64_t updates_lost = 0;
  /// Times a PS task was lost and its shards' backups took over at once (replicated
  /// shards, StrategyOptions::ps_replicas > 1): nothing lost, nothing restored.
  int64_t ps_failovers = 0;
  /// Shard copies rebuilt on failed-over tasks that came back (restarted, or behind a healed
  /// link) and rejoined while training went on.
  int64_t replicas_rebuilt = 0;
  /// Shards with fewer serving copies than placed, as of the last failover or rejoin.
  int64_t under_replicated_shards = 0;
  /// The longest time closures were pending and none finished, in ms (a failover's or a
  /// restore's stall shows here; so does the slowest step).
  int64_t longest_stall_ms = 0;
  int64_t watchdog_reports = 0;  // times the watchdog found no progress
  /// PS snapshots that failed to be written (say, a full disk), over every PS task as last
  /// polled; the coordinator warns on stderr while they go on failing.
  int64_t snapshot_failures = 0;
  /// The oldest of the PS tasks' newest snapshots, in ms; -1 while some PS task has none
  /// (or snapshots are off).
  int64_t snapshot_age_ms = -1;
};

}  // namespace troupe
