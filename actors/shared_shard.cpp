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

}  // namespace troupe::actors
