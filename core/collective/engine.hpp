#pragma once

// The collective engine: the one owner of a group's collectives. A step submits buckets of
// gradients as the backward pass finishes them and goes on computing while the engine's
// thread reduces them (Horovod's background thread, PyTorch DDP's bucket reducer), so the
// late layers' gradients are on the wire while the earlier layers' are computed.
// Collectives run one at a time, in the order they were submitted: every rank submits the
// same ones in the same order, so the order is the protocol. `call` runs a collective on
// the caller's own thread once everything submitted before it has ended: where the caller
// would wait anyway, no thread hop is paid.
//
//   Engine engine;
//   auto late = engine.submit("dense_1", [&] { return all_reduce(group, late_grads); });
//   ... the backward pass of the earlier layers ...
//   auto st = engine.call([&] { return all_reduce(group, early_grads); });
//   auto first = engine.drain();  // waits for `late` too; the first failure since the last drain
//
// After a failed collective the ones queued behind it do not run (on a ring every later one
// would fail too, after its own timeout): their tickets and later calls get an error naming
// the failure, until drain() has reported it. The engine knows no sockets: a job is any
// function (an all-reduce on a collective::Group, a ring's broadcast).

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "core/expected.hpp"

namespace troupe::collective {

class Engine {
 public:
  using Job = std::function<core::Status()>;

  /// A submitted collective: wait() returns how it ended (once).
  class Ticket {
   public:
    Ticket() = default;
    bool valid() const { return outcome_.valid(); }
    core::Status wait() { return outcome_.get(); }

   private:
    friend class Engine;
    explicit Ticket(std::future<core::Status> f) : outcome_(std::move(f)) {}
    std::future<core::Status> outcome_;
  };

  struct Stats {
    uint64_t submitted = 0;  // ran on the engine's thread
    uint64_t called = 0;     // ran on a caller's thread
    uint64_t skipped = 0;    // not run: an earlier collective had failed
  };

  Engine() = default;
  /// Collectives queued and not started end with a cancelled error; a running one is
  /// waited for (a ring's own timeout bounds it).
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  /// Queues `job` (named `what` in errors) to run on the engine's thread after everything
  /// submitted before it. The thread starts at the first submit.
  Ticket submit(std::string what, Job job);
  /// Runs `job` on this thread once every collective submitted before has ended, and
  /// returns its outcome (or the earlier failure, without running it).
  core::Status call(const std::string& what, const Job& job);
  /// Waits until every submitted collective has ended. Returns the first failure since the
  /// last drain (ok if none) and forgets it: the collectives after it run again.
  core::Status drain();
  Stats stats() const;

 private:
  struct Item {
    std::string what;
    Job job;
    std::promise<core::Status> outcome;
  };
  void loop();
  /// Runs `job` outside the lock, turning an exception into an error naming `what`.
  static core::Status run(const std::string& what, const Job& job);
  /// The error of a collective not run because `failure_` came first (lock held).
  core::Error skipped(const std::string& what) const;
  /// Records how `what` ended and wakes the waiters (lock held).
  void ended(const std::string& what, const core::Status& st);

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> queue_;
  bool busy_ = false;  // a collective runs (on the engine's thread or a caller's)
  bool stopping_ = false;
  std::optional<core::Error> failure_;
  std::string failed_what_;
  Stats stats_;
  std::thread thread_;
};

}  // namespace troupe::collective
