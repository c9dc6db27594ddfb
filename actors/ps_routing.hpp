#pragma once

// Which PS task serves each replicated shard now. Placements (net::Placement) name a
// shard's primary and its backups once, when it is created; what changes during a job is
// the set of tasks lost for good, and the epoch counts those changes. A shard is served by
// the first of its replicas not lost (pulls go there) and updated on every replica not lost
// (a push is acknowledged once all of them applied it). The chief's coordinator decides a
// failover; the workers and the chief's own reads each keep one of these, told of each
// new epoch. Thread-safe: a worker's control actor writes it while its step reads it.

#include <cstdint>
#include <mutex>
#include <vector>

#include "net/wire.hpp"

namespace troupe::actors {

class PsRouting {
 public:
  /// The replicas of `p` that serve it now, the one pulls go to first. Empty: every
  /// replica is lost.
  std::vector<int32_t> live(const net::Placement& p) const;
  /// The task pulls of `p` go to; -1 when every replica is lost.
  int32_t primary(const net::Placement& p) const;
  uint64_t epoch() const;
  std::vector<int32_t> lost() const;
  bool is_lost(int32_t task) const;
  /// Adopts (epoch, lost) when newer than what it has; returns whether it did.
  bool update(uint64_t epoch, std::vector<int32_t> lost);
  /// Marks `task` lost in a new epoch if every shard of `placements` it holds keeps a
  /// live replica; returns whether it did (false: some shard would have none left, or it
  /// was lost already).
  bool fail_over(int32_t task, const std::vector<net::Placement>& placements);
  /// Shards of `placements` with fewer live replicas than `replicas`.
  int64_t under_replicated(const std::vector<net::Placement>& placements, int replicas) const;

 private:
  std::vector<int32_t> live_locked(const net::Placement& p) const;
  mutable std::mutex mutex_;
  uint64_t epoch_ = 0;
  std::vector<int32_t> lost_;  // sorted
};

/// The replica count of `placements` (1 + backups of the first; all are placed alike).
int replica_count(const std::vector<net::Placement>& placements);

}  // namespace troupe::actors
