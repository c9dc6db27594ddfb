#include "actors/shared_shard.hpp"

#include "core/assert.hpp"

namespace troupe::actors {

WriterFirstLock::WriterFirstLock() {
  pthread_rwlockattr_t attr;
  pthread_rwlockattr_init(&attr);
  pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
  const int rc = pthread_rwlock_init(&rw_, &attr);
  pthread_rwlockattr_destroy(&attr);
  TROUPE_ASSERT(rc == 0, "pthread_rwlock_init failed");
}

WriterFirstLock::~WriterFirstLock() {
  pthread_rwlock_destroy(&rw_);
}

void WriterFirstLock::lock() {
  pthread_rwlock_wrlock(&rw_);
}
void WriterFirstLock::unlock() {
  pthread_rwlock_unlock(&rw_);
}
void WriterFirstLock::lock_shared() {
  pthread_rwlock_rdlock(&rw_);
}
void WriterFirstLock::unlock_shared() {
  pthread_rwlock_unlock(&rw_);
}

namespace {
int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

void SharedShard::renew(std::chrono::milliseconds lease) {
  lease_until.store(steady_ns() + std::chrono::nanoseconds(lease).count());
}

core::Status SharedShard::leased() const {
  const int64_t until = lease_until.load(std::memory_order_relaxed);
  if (until == 0 || steady_ns() < until) return {};
  return core::make_error(core::Errc::unavailable,
                          "this PS task's lease from the chief lapsed " +
                              std::to_string((steady_ns() - until) / 1000000) +
                              " ms ago: it may have been failed over");
}

core::Status SharedShard::admit(uint64_t request_epoch) {
  uint64_t seen = epoch.load();
  while (request_epoch > seen && !epoch.compare_exchange_weak(seen, request_epoch)) {
  }
  if (request_epoch >= seen) return {};
  return core::make_error(core::Errc::unavailable,
                          "routed by placement epoch " + std::to_string(request_epoch) +
                              ", but this PS task is at epoch " + std::to_string(seen) +
                              ": a replica failed over");
}

}  // namespace troupe::actors
