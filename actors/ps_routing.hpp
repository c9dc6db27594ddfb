#pragma once

// Which PS task serves each replicated shard now. Placements (net::Placement) name a
// shard's primary and its backups once, when it is created; what changes during a job is
// the set of tasks lost, the set of tasks rejoining (being given copies of their shards
// again), and the epoch counts those changes. A shard is served by the first of its
// replicas neither lost nor rejoining (pulls go there) and updated on every replica not
// lost (a push is acknowledged once all of them applied it; a rejoining task keeps the
// updates it gets until its copies arrive). The chief's coordinator decides failovers and
// rejoins; the workers and the chief's own reads each keep one of these, told of each new
// epoch. Thread-safe: a worker's control actor writes it while its step reads it.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <vector>

#include "net/wire.hpp"

namespace troupe::actors {

class PsRouting {
 public:
  /// The replicas of `p` that take its updates now: the one pulls go to first, rejoining
  /// ones last. Empty: every replica is lost.
  std::vector<int32_t> live(const net::Placement& p) const;
  /// The task pulls of `p` go to; -1 when no replica serves (every one lost or rejoining).
  int32_t primary(const net::Placement& p) const;
  uint64_t epoch() const;
  /// Waits at most `timeout` for the epoch to move past `epoch`; returns whether it has.
  bool wait_past(uint64_t epoch, std::chrono::milliseconds timeout) const;
  std::vector<int32_t> lost() const;
  std::vector<int32_t> joining() const;
  bool is_lost(int32_t task) const;
  bool is_joining(int32_t task) const;
  /// Adopts (epoch, lost, joining) when newer than what it has; returns whether it did.
  bool update(uint64_t epoch, std::vector<int32_t> lost, std::vector<int32_t> joining = {});
  /// Marks `task` lost in a new epoch if every shard of `placements` it holds keeps a
  /// serving replica; returns whether it did (false: some shard would have none left, or it
  /// was lost already). A rejoining task is lost again at once (it served nothing).
  bool fail_over(int32_t task, const std::vector<net::Placement>& placements);
  /// A lost task rejoins: in a new epoch it takes updates but serves nothing. False when
  /// it was not lost.
  bool begin_rejoin(int32_t task);
  /// Its copies are whole: in a new epoch it serves again (false when it was not
  /// rejoining).
  bool finish_rejoin(int32_t task);
  /// Shards of `placements` with fewer serving replicas than `replicas`.
  int64_t under_replicated(const std::vector<net::Placement>& placements, int replicas) const;

 private:
  std::vector<int32_t> serving_locked(const net::Placement& p) const;
  mutable std::mutex mutex_;
  mutable std::condition_variable moved_;  // notified with each new epoch
  uint64_t epoch_ = 0;
  std::vector<int32_t> lost_;     // sorted
  std::vector<int32_t> joining_;  // sorted, none of them lost
};

/// The replica count of `placements` (1 + backups of the first; all are placed alike).
int replica_count(const std::vector<net::Placement>& placements);

}  // namespace troupe::actors
