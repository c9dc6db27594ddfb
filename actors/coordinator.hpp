#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include <caf/all.hpp>

#include "net/wire.hpp"
#include "troupe/remote_value.hpp"

namespace troupe::actors {

/// What the user's thread and the coordinator actor share: the RemoteValues of scheduled
/// closures and the counters join() waits on. Every access holds the mutex.
class ClosureBook {
 public:
  struct Counters {
    int64_t scheduled = 0, completed = 0, failed = 0, cancelled = 0, retried = 0, workers_lost = 0;
  };

  uint64_t add(std::shared_ptr<detail::RemoteState> state);
  void complete(uint64_t id, std::vector<char> bytes);
  /// An application error: the closure fails; the first such error is kept for join().
  void fail(uint64_t id, core::Error error);
  void cancel(uint64_t id, const core::Error& why);
  void retried();
  void worker_lost();
  /// Waits until every scheduled closure is settled; returns (and clears) the first error.
  core::Status join();
  bool done();
  Counters counters();

 private:
  void settle_locked(uint64_t id, detail::RemoteState::Status s, std::vector<char> bytes,
                     core::Error e);

  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t next_id_ = 1;
  std::unordered_map<uint64_t, std::shared_ptr<detail::RemoteState>> pending_;
  Counters counters_;
  std::optional<core::Error> first_error_;
};

struct CoordinatorState {
  struct Worker {
    caf::actor handle;
    bool ready = false;  // has the variable placement
    bool alive = true;
    std::map<uint64_t, net::ClosureMsg> in_flight;  // by closure id, oldest first
  };
  std::vector<Worker> workers;
  std::deque<net::ClosureMsg> queue;
  std::vector<net::Placement> placements;
  std::shared_ptr<ClosureBook> book;
  std::chrono::milliseconds closure_timeout{60000};
  size_t max_in_flight = 8;
  static inline const char* name = "troupe.coordinator";
};

/// The closure queue. Takes (run, ClosureMsg) from the user's thread, keeps up to
/// `max_in_flight` closures in flight per worker (the worker runs them in order; the next
/// one waits in its mailbox instead of a network round trip away), settles RemoteValues through the
/// ClosureBook. A worker that goes down (down message) or does not answer within the closure
/// timeout has its closures put back at the front of the queue; an application error fails its
/// closure and cancels everything queued (the first error wins).
caf::behavior coordinator(caf::stateful_actor<CoordinatorState>* self,
                          std::vector<caf::actor> workers, std::vector<net::Placement> placements,
                          std::shared_ptr<ClosureBook> book,
                          std::chrono::milliseconds closure_timeout, size_t max_in_flight);

}  // namespace troupe::actors
