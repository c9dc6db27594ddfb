#pragma once

// The chief's coordinator: the closure queue, the RemoteValue book and the first error,
// over one proxy actor per remote task (worker_proxy.cpp, ps_proxy.cpp). What it decides
// with is plain code in closure_book.hpp.

#include <memory>
#include <vector>

#include <caf/all.hpp>

#include "actors/closure_book.hpp"
#include "actors/ps_routing.hpp"
#include "actors/task_link.hpp"
#include "core/runtime/coordinator_types.hpp"
#include "net/wire.hpp"

namespace troupe::actors {

/// Spawns the coordinator and, linked to it, a proxy per worker and per PS task.
///
/// It takes (run, ClosureMsg) from the user's thread and keeps up to
/// `max_in_flight_per_worker` closures at each worker (the worker runs them in order; the
/// next one waits in its mailbox instead of a network round trip away), sending each to
/// the worker pick_worker() chooses. A worker lost (down message, or no answer within the
/// closure timeout) hands back its closures: they go to the front of the queue, and its
/// proxy tries its address every `rejoin_interval` until a worker answers there again; it
/// gets the placement, rebuilds every per-worker dataset from the top, and takes closures.
/// An application error fails its closure and cancels everything queued and in flight
/// (the first error wins). (dataset, name) has every worker build that dataset's iterator
/// and answers `ok` once each has or was lost meanwhile, or the first worker's own error.
/// With `ps_recovery`, a PS task that goes down pauses dispatch until it is back, restored
/// from its snapshot, or fails the job with `unavailable` after the deadline. With
/// replicated shards (placements with backups), a PS task that goes down while every shard
/// it holds has a live replica elsewhere fails over instead: `routing` (shared with the
/// chief's own reads; null: its own) moves to a new epoch without it, every PS task and
/// worker is told, and dispatch goes on. With a
/// `watchdog_timeout`, a check every quarter of it reports what is in flight where when
/// nothing has finished for that long. (shutdown) asks every task to stop serving and
/// answers with those that did not acknowledge.
caf::actor spawn_coordinator(caf::actor_system& sys, std::vector<Endpoint> workers,
                             std::vector<Endpoint> ps, std::vector<net::Placement> placements,
                             std::shared_ptr<ClosureBook> book, CoordinatorOptions config,
                             std::shared_ptr<PsRouting> routing = nullptr);

}  // namespace troupe::actors
