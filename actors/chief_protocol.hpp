#pragma once

// The messages between the chief's coordinator and its proxies (worker_proxy, ps_proxy).
// They never leave the chief's process: what crosses the network is in net/wire.hpp.

#include <caf/all.hpp>

#include "actors/closure_book.hpp"
#include "actors/ps_routing.hpp"
#include "actors/task_link.hpp"
#include "net/wire.hpp"

namespace troupe::actors {

/// The actors' settings are the public ones.
using CoordinatorConfig = CoordinatorOptions;

namespace chief {

// coordinator -> worker proxy: net::run_atom (ClosureMsg), net::dataset_atom (name; answers
// ok, or the worker's own error), net::cancel_atom (through: the coordinator has settled
// every closure up to that id `cancelled`), net::shutdown_atom (answers bool: acknowledged).
// (forget, name): a dataset whose creation failed; a worker that rejoins does not build it.
// coordinator -> PS proxy: net::shutdown_atom.
// chief API -> coordinator: (forget, name) when the call creating dataset `name` failed on its
//   own bound (the coordinator passes it on to every worker proxy).

// worker proxy -> coordinator (the atoms are in net/wire.hpp, with every other):
// (ready, w): up to date, takes closures.
// (lost, w, closures): the worker is lost; every closure it held, in the order sent (the
//   first was running). Those still pending in the book go back to the queue.
// (back, w, closures): arrived while the worker was not taking closures; never sent to it.
// (done, w, id): answered; a result is already settled in the book by the proxy.
// (failed, w, closure, error): the step's own error (the coordinator fails it, or runs it
//   again once a PS is back).
// coordinator -> worker and PS proxies: (failover) the routing has a new epoch.
// PS proxy -> coordinator: (ps_down, t) dispatch pauses, or a failover when every shard of
//   t has a live replica elsewhere; (ps_join, t, actor) a failed-over task answers again:
//   it rejoins as a replica (the coordinator's rebuild, which answers (rebuilt, t, round,
//   shards) or (rebuilt, t, round, error)); (ps_up, t) back, restored or not;
// (ps_failed, t, error) gone for good.
// Each actor's own timers: tick, rejoin, deadline, resume, watchdog; (task_down,
// connection): the proxy's down handler, in order with the state's other messages.
using net::back_atom;
using net::deadline_atom;
using net::done_atom;
using net::failed_atom;
using net::forget_atom;
using net::lost_atom;
using net::ps_down_atom;
using net::ps_failed_atom;
using net::ps_join_atom;
using net::ps_up_atom;
using net::ready_atom;
using net::rebuilt_atom;
using net::rejoin_atom;
using net::resume_atom;
using net::task_down_atom;
using net::tick_atom;
using net::watchdog_atom;

/// An error the worker itself replied with (category troupe: the step's outcome, even when
/// that is "my PS is unavailable"), as opposed to CAF's own (timeout, receiver down), which
/// mean the worker could not answer.
inline bool is_application_error(const caf::error& e) {
  return e.category() == net::error_category;
}

}  // namespace chief

/// Spawns the proxy of worker `index`, linked to `coordinator` (the parent). It hands the
/// worker `placements` whenever it (re)connects.
/// After a failover (net::failover_atom from the coordinator) it tells the worker the
/// routing's new epoch.
caf::actor spawn_worker_proxy(caf::event_based_actor* coordinator, size_t index, Endpoint task,
                              std::vector<net::Placement> placements,
                              std::shared_ptr<const PsRouting> routing,
                              std::shared_ptr<ClosureBook> book, const CoordinatorConfig& config);
/// Spawns the proxy of PS task `index`, linked to `coordinator`. With replicated shards it
/// watches its task whether or not PS recovery is on; after a failover it tells its task
/// the new epoch, or, when its task is the one lost, stops waiting for it.
caf::actor spawn_ps_proxy(caf::event_based_actor* coordinator, size_t index, Endpoint task,
                          std::shared_ptr<const PsRouting> routing, bool replicated,
                          std::shared_ptr<ClosureBook> book, const CoordinatorConfig& config);

}  // namespace troupe::actors
