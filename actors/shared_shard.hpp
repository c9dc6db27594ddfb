#pragma once

// A PS task's shards as its actor and its tensor channel share them. Whoever changes them
// (the actor: create, assign, CAF-message updates; the channel's threads: the updates that
// arrive on it) holds the lock exclusively; whoever only reads them holds it shared (the
// channel's pulls, the actor's copy of a shard for a snapshot, its stats). So requests on
// the channel are served on the connection's thread, without the hop to the actor and back.
// Updates stay ordered (one writer at a time), at most once (the applied tags are read and
// written under the lock with the update), and a snapshot's copy of a shard is consistent
// (no update lands while it is taken; pulls change nothing).

#include <pthread.h>

#include <atomic>
#include <chrono>
#include <cstdint>

#include "actors/ps_shard_state.hpp"
#include "core/expected.hpp"

namespace troupe::actors {

/// A readers-writer lock that lets a waiting writer in before readers that come after it
/// (glibc's default, and so std::shared_mutex's, lets a stream of readers hold a writer
/// off indefinitely). Meets SharedMutex for std::unique_lock and std::shared_lock; not
/// recursive.
class WriterFirstLock {
 public:
  WriterFirstLock();
  ~WriterFirstLock();
  WriterFirstLock(const WriterFirstLock&) = delete;
  WriterFirstLock& operator=(const WriterFirstLock&) = delete;
  void lock();
  void unlock();
  void lock_shared();
  void unlock_shared();

 private:
  pthread_rwlock_t rw_;
};

struct SharedShard {
  WriterFirstLock lock;
  PsShardState state;
  // What the channel's direct pulls did, counted here: they hold the lock shared and must
  // not write the state's counters. The shard's stats add them.
  std::atomic<int64_t> pulls{0};
  std::atomic<int64_t> rows_pulled{0}, bytes_pulled{0};
  std::atomic<int64_t> rejected{0};
  std::atomic<int64_t> bf16_requests{0};
  /// The newest placement epoch this task has seen (net::PsRouting), from the chief or from
  /// any request: a request routed by an older one is refused, so a worker that has not
  /// heard of a failover cannot update a replica behind the promoted one's back.
  std::atomic<uint64_t> epoch{0};
  /// Raises the epoch to `request_epoch` if newer; an older one is an `unavailable` error
  /// (the sender retries once it has the new placement).
  core::Status admit(uint64_t request_epoch);
  /// The chief's lease with replicated shards (steady-clock ns; 0: none was ever given,
  /// nothing is refused): a task cut off from the chief stops serving workers when it
  /// lapses, before the chief, which notices only after its heartbeat timeout (longer than
  /// the lease), promotes another copy. So no worker that has not heard of the failover
  /// yet reads a value older than what the promoted copy acknowledged.
  std::atomic<int64_t> lease_until{0};
  void renew(std::chrono::milliseconds lease);
  /// unavailable once a lease given has lapsed.
  core::Status leased() const;
};

}  // namespace troupe::actors
