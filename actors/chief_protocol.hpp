#pragma once

// The messages between the chief's coordinator and its proxies (worker_proxy, ps_proxy).
// They never leave the chief's process: what crosses the network is in net/wire.hpp.

#include <caf/all.hpp>

#include "actors/closure_book.hpp"
#include "actors/task_link.hpp"
#include "net/wire.hpp"

namespace troupe::actors {

/// The actors' settings are the public ones.
using CoordinatorConfig = CoordinatorOptions;

namespace chief {

// coordinator -> worker proxy: net::run_atom (ClosureMsg), net::dataset_atom (name; answers
// ok, or the worker's own error), net::cancel_atom (through: the coordinator has settled
// every closure up to that id `cancelled`), net::shutdown_atom (answers bool: acknowledged).
// coordinator -> PS proxy: net::shutdown_atom.

// worker proxy -> coordinator
using ready_atom = caf::atom_constant<caf::atom("wready")>;  // (w): up to date, takes closures
/// (w, closures): the worker is lost; every closure it held, in the order sent (the first
/// was running). Those still pending in the book go back to the queue.
using lost_atom = caf::atom_constant<caf::atom("wlost")>;
/// (w, closures): arrived while the worker was not taking closures; never sent to it.
using back_atom = caf::atom_constant<caf::atom("wback")>;
/// (w, id): answered; a result is already settled in the book by the proxy.
using done_atom = caf::atom_constant<caf::atom("wdone")>;
/// (w, closure, error): the step's own error (the coordinator fails it, or runs it again
/// once a PS is back).
using failed_atom = caf::atom_constant<caf::atom("wfailed")>;

// PS proxy -> coordinator
using ps_down_atom = caf::atom_constant<caf::atom("psdown")>;      // (t): down; dispatch pauses
using ps_up_atom = caf::atom_constant<caf::atom("psup")>;          // (t): back, restored or not
using ps_failed_atom = caf::atom_constant<caf::atom("psfailed")>;  // (t, error): gone for good

// Each actor's own timers.
using tick_atom = caf::atom_constant<caf::atom("tick")>;
using rejoin_atom = caf::atom_constant<caf::atom("rejoin")>;
using deadline_atom = caf::atom_constant<caf::atom("deadline")>;
using resume_atom = caf::atom_constant<caf::atom("resume")>;
using watchdog_atom = caf::atom_constant<caf::atom("watchdog")>;
/// (connection): the task's actor went down (the proxy's down handler, in order with
/// the state's other messages).
using task_down_atom = caf::atom_constant<caf::atom("taskdown")>;

/// An error the worker itself replied with (category troupe: the step's outcome, even when
/// that is "my PS is unavailable"), as opposed to CAF's own (timeout, receiver down), which
/// mean the worker could not answer.
inline bool is_application_error(const caf::error& e) {
  return e.category() == net::error_category;
}

}  // namespace chief

/// Spawns the proxy of worker `index`, linked to `coordinator` (the parent). It hands the
/// worker `placements` whenever it (re)connects.
caf::actor spawn_worker_proxy(caf::event_based_actor* coordinator, size_t index, Endpoint task,
                              std::vector<net::Placement> placements,
                              std::shared_ptr<ClosureBook> book, const CoordinatorConfig& config);
/// Spawns the proxy of PS task `index`, linked to `coordinator`.
caf::actor spawn_ps_proxy(caf::event_based_actor* coordinator, size_t index, Endpoint task,
                          std::shared_ptr<ClosureBook> book, const CoordinatorConfig& config);

}  // namespace troupe::actors
