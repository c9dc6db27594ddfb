#pragma once

// A ring whose membership can change: the ranks of a job (its "slots", one per
// chief/worker task, fixed by TF_CONFIG) meet at slot 0, which decides each generation's
// members and tells every member who its neighbours are. After a failure the survivors
// report to slot 0 and a new ring is formed without the lost ranks; a process that comes
// back knocks at slot 0 and is taken in at the next step boundary. The state to carry on
// from is not the ring's business: the membership names the rank whose state (the most
// steps done) the others take by broadcast.
//
//   auto group = ElasticRing::join(slot, addresses, options, /*step=*/0, /*has_state=*/false);
//   ... (*group)->ring().all_reduce(...) fails: a rank died ...
//   auto m = (*group)->reform(step);   // the survivors' new ring; m->root holds the state
//
// Slot 0 is the meeting point: it must stay (as TensorFlow's chief); losing it ends the job.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "actors/collective/ring.hpp"
#include "core/expected.hpp"
#include "net/channel.hpp"
#include "net/connection_server.hpp"

namespace troupe::collective {

struct ElasticOptions {
  /// The ring's own options; ring.connect_timeout bounds the first formation (every slot
  /// must come), ring.group_id tells this job's connections from any other's.
  RingOptions ring;
  /// How long slot 0 waits, in a re-forming, for a member that neither reports nor closes
  /// its connection (a stopped process) before going on without it.
  std::chrono::milliseconds rejoin_timeout{10000};
  /// Fewer members than this after a loss ends the job with an error.
  int min_ranks = 1;
  /// Asked while join() waits for the others (between tries, and at least every 50 ms of
  /// waiting), on join()'s thread: true ends join() with `cancelled`. join() only: the
  /// ring does not keep it.
  std::function<bool()> stop;
};

/// One generation of the ring: who is in it, and whose state everyone starts from.
struct Membership {
  uint64_t generation = 0;
  std::vector<int> slots;   // ascending; rank i of the ring is slots[i]
  int root = 0;             // the rank holding the state to broadcast
  int64_t step = 0;         // the root's step
  std::vector<int> lost;    // slots of the previous generation not in this one
  std::vector<int> joined;  // slots in this generation not in the previous one
};

class ElasticRing {
 public:
  /// Joins the job as `slot` of `addresses` (listening on addresses[slot]) and forms the
  /// first ring, or, if the job is running, is taken in at its next re-forming. `step` and
  /// `has_state` say what this process holds (a fresh process: 0, false).
  static core::Expected<std::unique_ptr<ElasticRing>> join(int slot,
                                                           std::vector<std::string> addresses,
                                                           ElasticOptions options, int64_t step,
                                                           bool has_state);
  ~ElasticRing();
  ElasticRing(const ElasticRing&) = delete;
  ElasticRing& operator=(const ElasticRing&) = delete;

  int slot() const { return slot_; }
  int rank() const { return rank_; }
  int size() const { return static_cast<int>(membership_.slots.size()); }
  const Membership& membership() const { return membership_; }
  Ring& ring() { return *ring_; }

  /// At slot 0: how many processes are waiting to be taken in (0 at other slots).
  int waiting() const;
  /// Forms the next generation: every member calls it (after a failed collective, or when
  /// told at a step boundary that someone waits), with the steps it has done. With `admit`
  /// off (every member passes the same) processes waiting to join stay waiting for a later
  /// re-forming. Fails when slot 0 is gone or fewer than min_ranks remain.
  core::Expected<Membership> reform(int64_t step, bool admit = true);

  struct Pending;

 private:
  ElasticRing(int slot, std::vector<std::string> addresses, ElasticOptions options);
  /// One connection at the door, proven a member: reads its knock and queues it (a link,
  /// a join), or answers it (a status knock).
  void take(net::Socket& s, const std::string& peer);
  /// Answers another member's status knock (on its connection's thread) with this slot's
  /// progress against the tag it asks about.
  void answer_status(net::Socket& s, int64_t tag_bytes);
  /// The stall report's every-rank part: asks each member of the current ring (at once,
  /// within a second) whether it has submitted `tag` and what it is doing.
  std::string explain_stall(const std::string& tag);
  /// Slot 0: collects the members of the next generation and sends them the plan.
  core::Expected<Membership> lead(uint64_t generation, std::vector<int> expected, int64_t step,
                                  bool has_state, std::chrono::milliseconds wait, bool admit);
  /// Any slot: reads the plan slot 0 sent on the control connection.
  core::Expected<Membership> follow(std::chrono::milliseconds wait);
  /// Connects the new generation's ring.
  /// Fills m.lost and m.joined against the current membership; `replaced` slots (a new
  /// process in a member's slot) count as both.
  void note_changes(Membership& m, const std::vector<int32_t>& replaced) const;
  core::Status link(const Membership& m);
  /// Whether options_.stop has said to give up (latched: a predicate that says so once is
  /// heard everywhere after; always false once join() has returned). join()'s thread only.
  bool stopped() {
    if (!stopped_ && options_.stop && options_.stop()) stopped_ = true;
    return stopped_;
  }
  core::Error stopped_error() const;

  int slot_;
  int rank_ = 0;
  std::vector<std::string> addresses_;
  ElasticOptions options_;
  bool stopped_ = false;
  Membership membership_;
  std::unique_ptr<Ring> ring_;
  std::shared_ptr<RingProgress> progress_ = std::make_shared<RingProgress>();
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Pending>> joins_;  // slot 0: processes knocking to join
  std::deque<std::unique_ptr<Pending>> links_;  // ring connections from left neighbours
  net::Socket control_;                         // other slots: the connection to slot 0
  std::map<int, net::Socket> controls_;         // slot 0: each member's connection
  net::RefusalLog refusals_;
  // Last, so that it stops (its threads touch the members above) before they go.
  std::unique_ptr<net::ConnectionServer> door_;
};

}  // namespace troupe::collective
