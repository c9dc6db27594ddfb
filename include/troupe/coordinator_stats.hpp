#pragma once

#include <cstdint>

namespace troupe {

/// What a ClusterCoordinator has done so far (TensorFlow has no such counters).
struct CoordinatorStats {
  int64_t scheduled = 0;     // closures scheduled
  int64_t completed = 0;     // closures whose RemoteValue got a result
  int64_t failed = 0;        // closures that raised an application error
  int64_t cancelled = 0;     // closures cancelled by another closure's error
  int64_t retried = 0;       // closures taken back from a lost worker and queued again
  int64_t workers_lost = 0;  // times a worker was lost (down, hung, or silent)
  int64_t worker_rejoins = 0;  // times a lost worker came back and took closures again
  int64_t ps_restores = 0;     // times a PS task came back restored from its snapshot
  /// Updates the restored PS tasks had applied after their snapshot (lost with them), as
  /// far as the coordinator saw: it polls each PS's count every rejoin interval, so updates
  /// of the last interval before a failure are not counted.
  int64_t updates_lost = 0;
};

}  // namespace troupe
