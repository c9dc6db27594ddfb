#pragma once

// What the coordinator decides with, as plain code (no actor, no CAF): the ClosureBook the
// user's thread and the chief's actors share, and the dispatch policy.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "core/expected.hpp"
#include "core/runtime/coordinator_types.hpp"
#include "core/runtime/remote_value.hpp"

namespace troupe::actors {

/// A fresh chief incarnation in [1, 2^15): random per process, then counting up, so two
/// coordinators of one process never share one and two processes rarely do.
uint32_t fresh_incarnation();

/// What the user's thread and the coordinator actor share: the RemoteValues of scheduled
/// closures and the counters join() waits on. Every access holds the mutex.
class ClosureBook {
 public:
  using Counters = CoordinatorStats;

  /// Closure ids start at (incarnation << 32) + 1; ids stay below 2^47 (the workers' tags
  /// keep 16 bits for repetitions), so the incarnation is taken modulo 2^15. Incarnation 0
  /// draws one (fresh_incarnation()): ids must never repeat across chief processes, or
  /// PS tasks that kept running would drop a restarted chief's pushes as seen before.
  /// `max_pending` > 0 bounds the closures outstanding: add() waits for room.
  explicit ClosureBook(uint32_t incarnation = 0, size_t max_pending = 0);

  /// Registers a closure and gives its id; while an error is pending (not yet raised by
  /// join()), nothing is added and that error is returned, as TensorFlow's schedule()
  /// raises it.
  core::Expected<uint64_t> add(std::shared_ptr<detail::RemoteState> state);
  /// Every id of this book below the result is settled.
  uint64_t settled_below();
  /// What the latest kept error cancels: the last id handed out before fail() or abort()
  /// kept it. An id handed out later was scheduled after join() raised that
  /// error, so it is not the error's to cancel, even when the coordinator acts on the
  /// error after it was handed out. Without an error yet: the last id handed out.
  uint64_t error_through();
  uint32_t incarnation() const { return incarnation_; }
  /// The coordinator is gone: every pending closure is settled `cancelled` with `why`, so
  /// no fetch() or join() waits on it.
  void abandon(const core::Error& why);
  void complete(uint64_t id, std::vector<char> bytes);
  /// An application error: the closure fails; the first such error is kept for join().
  void fail(uint64_t id, core::Error error);
  void cancel(uint64_t id, const core::Error& why);
  void retried();
  void worker_lost(uint64_t worker);
  void worker_rejoined();
  void ps_restored(int64_t updates_lost);
  void ps_reconnected();
  /// A PS task's shards failed over to their backups; `under_replicated` shards now have
  /// fewer live replicas than placed.
  void ps_failed_over(int64_t under_replicated);
  /// A failed-over task rejoined with copies of `shards` shards.
  void replicas_rebuilt(int64_t shards, int64_t under_replicated);
  /// A worker answered the first closure it ran on a connection: the job's start-up (or a
  /// rejoin) moved on. Workers' first closures are timed from the last of these.
  void first_closure_answered();
  /// When a worker last answered its first closure on a connection (none yet: nullopt).
  std::optional<std::chrono::steady_clock::time_point> last_first_closure_answered();
  /// Pending closures went `gap` without one finishing (the longest is kept).
  void progress_gap(std::chrono::milliseconds gap);
  void watchdog_fired();
  /// PS task `task`'s snapshot figures, as last polled (PsStats).
  void ps_snapshots(size_t task, int64_t failures, int64_t age_ms);
  /// An error not tied to one closure (a PS that did not come back): join() raises it.
  void abort(const core::Error& error);
  /// Waits until every scheduled closure is settled; returns (and clears) the first error.
  core::Status join();
  bool done();
  /// Waits at most `timeout` until every scheduled closure is settled; returns whether
  /// they are (join() then returns at once).
  bool wait_done(std::chrono::milliseconds timeout);
  /// Whether closure `id` is still unsettled (a cancelled one is not: it must not run again).
  bool pending(uint64_t id);
  Counters counters();
  /// Waits (at most `timeout`) until `pred(counters)` holds; returns whether it does.
  bool wait_for(const std::function<bool(const Counters&)>& pred,
                std::chrono::milliseconds timeout);

 private:
  void settle_locked(uint64_t id, detail::RemoteState::Status s, std::vector<char> bytes,
                     core::Error e);
  void keep_error_locked(const core::Error& error);

  std::mutex mu_;
  std::condition_variable cv_;
  uint32_t incarnation_;
  uint64_t next_id_;
  size_t max_pending_;
  std::map<uint64_t, std::shared_ptr<detail::RemoteState>> pending_;  // by id: oldest first
  Counters counters_;
  std::optional<core::Error> first_error_;
  std::optional<uint64_t> error_through_;  // error_through()'s, set with first_error_
  std::map<size_t, std::pair<int64_t, int64_t>> ps_snapshots_;  // task -> (failures, age ms)
  std::optional<std::chrono::steady_clock::time_point> first_answered_;
};

/// What the dispatch policy sees of a worker.
struct WorkerLoad {
  bool alive = true;     // not lost (it may still be being brought up to date)
  bool ready = false;    // alive and up to date: it may take closures
  size_t in_flight = 0;  // closures sent and not answered
};

/// The worker the next closure goes to, or workers.size() for none: an idle ready worker
/// first (round robin after `after`); a closure is sent ahead (to the ready worker with the
/// fewest in flight, below `max_in_flight`) only when every live worker is ready and busy.
size_t pick_worker(const std::vector<WorkerLoad>& workers, size_t after, size_t max_in_flight);

}  // namespace troupe::actors
