#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <unordered_map>
#include <vector>

#include <caf/all.hpp>

#include "net/wire.hpp"
#include "troupe/coordinator_types.hpp"
#include "troupe/remote_value.hpp"

namespace troupe::actors {

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
  /// The last id handed out (0: none yet).
  uint64_t last_id();
  uint32_t incarnation() const { return incarnation_; }
  /// The coordinator is gone: every pending closure is settled `cancelled` with `why`, so
  /// no fetch() or join() waits on it.
  void abandon(const core::Error& why);
  void complete(uint64_t id, std::vector<char> bytes);
  /// An application error: the closure fails; the first such error is kept for join().
  void fail(uint64_t id, core::Error error);
  void cancel(uint64_t id, const core::Error& why);
  void retried();
  void worker_lost();
  void worker_rejoined();
  void ps_restored(int64_t updates_lost);
  void ps_reconnected();
  void watchdog_fired();
  /// PS task `task`'s snapshot figures, as last polled (PsStats).
  void ps_snapshots(size_t task, int64_t failures, int64_t age_ms);
  /// An error not tied to one closure (a PS that did not come back): join() raises it.
  void abort(const core::Error& error);
  /// Waits until every scheduled closure is settled; returns (and clears) the first error.
  core::Status join();
  bool done();
  Counters counters();
  /// Waits (at most `timeout`) until `pred(counters)` holds; returns whether it does.
  bool wait_for(const std::function<bool(const Counters&)>& pred,
                std::chrono::milliseconds timeout);

 private:
  void settle_locked(uint64_t id, detail::RemoteState::Status s, std::vector<char> bytes,
                     core::Error e);

  std::mutex mu_;
  std::condition_variable cv_;
  uint32_t incarnation_;
  uint64_t next_id_;
  size_t max_pending_;
  std::map<uint64_t, std::shared_ptr<detail::RemoteState>> pending_;  // by id: oldest first
  Counters counters_;
  std::optional<core::Error> first_error_;
  std::map<size_t, std::pair<int64_t, int64_t>> ps_snapshots_;  // task -> (failures, age ms)
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

/// The actor's settings are the public ones.
using CoordinatorConfig = CoordinatorOptions;

/// A connected worker or PS task: its actor and the address it was reached at (where it is
/// looked for again when lost).
struct Endpoint {
  caf::actor handle;
  std::string host;
  uint16_t port = 0;
};

/// A fresh chief incarnation in [1, 2^15): random per process, then counting up, so two
/// coordinators of one process never share one and two processes rarely do.
uint32_t fresh_incarnation();

struct CoordinatorState {
  using Clock = std::chrono::steady_clock;
  struct InFlight {
    net::ClosureMsg closure;
    Clock::time_point sent;
    /// When the worker started it, as far as the chief can tell: it was sent to an idle
    /// worker, or the closure before it was answered. closure_timeout counts from here.
    std::optional<Clock::time_point> started;
    /// Settled `cancelled` at the chief; the worker was told and its answer is awaited.
    bool cancelled = false;
  };
  struct Worker : Endpoint {
    /// Counts the connections to this worker: replies and failures of an earlier one are
    /// ignored once it is lost.
    uint64_t generation = 0;
    bool ready = false;  // has the variable placement and every dataset
    bool alive = true;
    std::vector<InFlight> in_flight;  // in the order sent, which is the order it runs them
    caf::actor control;               // takes cancel messages while the worker is busy
  };
  /// Closures whose worker was lost while running them, by id: one that takes down
  /// `max_closure_losses` workers fails instead of crash-looping the job.
  std::map<uint64_t, int> losses;
  struct Ps : Endpoint {
    uint64_t generation = 0;
    int64_t process = 0;            // its process incarnation (PsStats::process); 0: not known yet
    bool restoring = false;         // down; waiting for it to come back
    bool failed = false;            // did not come back within the deadline
    int64_t last_updates = 0;       // its updates_applied, as last polled
    int64_t snapshot_failures = 0;  // as last polled
  };
  std::vector<Worker> workers;
  std::vector<Ps> ps;
  int unavailable_streak = 0;  // `unavailable` step errors in a row with no PS known down
  bool paused = false;         // dispatch waits a rejoin interval after such an error
  size_t last_dispatched = 0;
  std::deque<net::ClosureMsg> queue;
  std::vector<net::Placement> placements;
  std::vector<std::string> datasets;  // per-worker datasets created so far, rebuilt on rejoin
  /// A create_per_worker_dataset call waiting for the workers to build their iterators. A
  /// worker lost meanwhile is skipped (it builds the dataset when it rejoins).
  struct DatasetCall {
    caf::response_promise promise;
    std::string name;
    std::set<size_t> waiting;           // worker indices
    std::optional<core::Error> failed;  // the first worker's own error
  };
  std::list<DatasetCall> dataset_calls;
  std::shared_ptr<ClosureBook> book;
  CoordinatorConfig config;
  Clock::time_point last_progress;  // a closure finished, or work arrived with none pending
  Clock::time_point last_report;    // the watchdog's, since last_progress
  Clock::time_point last_snapshot_warning;
  static inline const char* name = "troupe.coordinator";
};

/// The closure queue. Takes (run, ClosureMsg) from the user's thread, keeps up to
/// `max_in_flight_per_worker` closures in flight per worker (the worker runs them in order; the
/// next one waits in its mailbox instead of a network round trip away), settles RemoteValues
/// through the ClosureBook. A worker that goes down (down message) or does not answer within
/// the closure timeout is lost: its closures go back to the front of the queue, and its
/// address is tried every `rejoin_interval` until a worker answers there again (restarted,
/// or resumed); that worker gets the placement, rebuilds every per-worker dataset from the
/// top, and then takes closures. An application error fails its closure and cancels
/// everything queued (the first error wins). (dataset, name) records a per-worker dataset
/// and has every ready worker build its iterator; it answers `ok` once each has, or was
/// lost meanwhile, or the first worker's own error (say, no such dataset function).
/// With `ps_recovery`, a PS task that goes down pauses dispatch until it answers on its
/// address again with its state restored (its `restored from` count tells how many updates
/// were lost), or fails the job with `unavailable` after the deadline. With a
/// `watchdog_timeout`, a check every quarter of it reports what is in flight where when
/// nothing has finished for that long.
caf::behavior coordinator(caf::stateful_actor<CoordinatorState>* self,
                          std::vector<Endpoint> workers, std::vector<Endpoint> ps,
                          std::vector<net::Placement> placements, std::shared_ptr<ClosureBook> book,
                          CoordinatorConfig config);

}  // namespace troupe::actors
