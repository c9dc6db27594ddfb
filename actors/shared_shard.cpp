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
