#pragma once

// The relays of a process's CAF links on one thread. A gate (net/gate.hpp) relays each
// member's link into this process's CAF, and a tunnel each of this process's links out to
// a task's gate: one blocking relay thread per link at each end made 512 workers x 16 PS
// tasks on one host more than 30,000 threads (the kernel's pid_max is 32,768). Here every
// plain link is two sockets in one epoll set, copied between without blocking: what a
// side cannot take yet waits in the link, and the other side is not read meanwhile
// (backpressure, as a blocked relay thread gave). Links over TLS keep a thread each
// (net::relay): a TLS record's write cannot be resumed part-way by this loop.
//
//   auto group = RelayPool::process().new_group();      // one per gate or tunnel
//   RelayPool::process().add(group, std::move(outside), std::move(inside), check_limit,
//                            [](core::Status st) { /* the link ended: st says why */ });
//   RelayPool::process().close(group);                   // ends the group's links

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/expected.hpp"
#include "net/socket.hpp"

namespace troupe::net {

class RelayPool {
 public:
  /// Runs once when a link ends, on the pool's thread (so it must not block, nor call
  /// close): an error when the outside sent what the BASP check refuses, none when a side
  /// simply closed.
  using Ended = std::function<void(core::Status)>;

  /// The process's pool (never destroyed: CAF may use a link until the process ends). Its
  /// thread starts with the first link.
  static RelayPool& process();

  uint64_t new_group();
  /// Whether the pool's thread runs (started here if not yet): false where it cannot be
  /// had, and every link then relays on a thread of its own.
  bool available();
  /// Relays between `outside` (the network; what it sends passes a BaspFrameCheck with
  /// `max_payload`) and `inside` (this process's CAF) until either ends or the group is
  /// closed; then both are closed and `ended` runs. Plain sockets only. False, the
  /// sockets given back untouched, when the pool's thread cannot be had: the caller relays.
  bool add(uint64_t group, Socket& outside, Socket& inside, uint32_t max_payload, Ended ended);
  /// Links of `group` open now.
  size_t size(uint64_t group) const;
  /// Waits until `group` has no link open, or `deadline`; whether it has none.
  bool wait_empty(uint64_t group, std::chrono::steady_clock::time_point deadline) const;
  /// Shuts every link of `group` down and waits until each has ended. Not from `ended`.
  void close(uint64_t group);

 private:
  RelayPool() = default;
  struct Link;
  struct Ending {
    Ended ended;
    core::Status status;
    uint64_t group;
  };
  bool start();
  void run();
  // The link's registered sockets in the epoll set as its state needs them now.
  void arm(Link& l);
  void unregister(Link& l, int side);
  // One event of a relaying link; false ends its relaying (`why`: a refused frame).
  bool relay_event(Link& l, int side, uint32_t events, core::Status& why);
  // Copies what side `from` has (false at its end, or when the other side fails).
  bool pump(Link& l, int from, core::Status& why, bool* read = nullptr);
  // Writes what waits for side `to` (false when it fails).
  bool flush(Link& l, int to);
  bool drain_hung_up(Link& l, int from, core::Status& why);
  // Side `x` hung up or takes no more; false when the link is over.
  bool peer_gone(Link& l, int x, core::Status& why);
  // Relaying over: FIN each open side, linger; its `ended` runs after this batch.
  void end_relaying(Link& l, std::vector<Ending>& ending);
  void linger_event(Link& l, int side);

  int epoll_ = -1;
  std::thread thread_;
  mutable std::mutex mu_;  // also held by the pool's thread while it handles events
  mutable std::condition_variable changed_;  // a link ended
  std::unordered_map<Link*, std::unique_ptr<Link>> links_;
  std::deque<Link*> lingering_;                // in the order their lingering ends
  std::unordered_map<uint64_t, size_t> open_;  // links per group still relaying
  uint64_t next_group_ = 1;
  bool started_ = false, failed_ = false;
};

}  // namespace troupe::net
