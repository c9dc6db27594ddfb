#pragma once

// The coordinator actor's steps that its two source files share: coordinator.cpp (workers,
// closures, cancellation, the watchdog) and coordinator_ps.cpp (PS health and recovery).
// Internal to the actor, not an interface.

#include <caf/all.hpp>

#include "actors/coordinator.hpp"

namespace troupe::actors::coordinator_steps {

using Self = caf::stateful_actor<CoordinatorState>;

// Local to the coordinator: try a PS task's address again; its deadline; poll PS counts.
using ps_rejoin_atom = caf::atom_constant<caf::atom("psrejoin")>;
using ps_deadline_atom = caf::atom_constant<caf::atom("psdeadln")>;
using poll_atom = caf::atom_constant<caf::atom("poll")>;

/// Sends queued closures to workers that can take them.
void dispatch(Self* self);
/// Ends the work with `why`: queued and in-flight closures are cancelled.
void cancel_all(Self* self, const core::Error& why);

/// Whether some PS task is down and being waited for.
bool any_ps_restoring(const CoordinatorState& st);
/// Whether a step's `unavailable` error means a PS going down (run the closure again).
bool retry_unavailable(Self* self);
void schedule_ps_rejoin(Self* self, size_t t);
/// A PS task's actor went down: pause, and look for it on its address.
void ps_down(Self* self, size_t t);
/// Whether a PS task answers on its address again, restored or merely reconnected.
void try_ps_rejoin(Self* self, size_t t);
/// Polls every PS task's counts (updates, process, snapshot figures); reschedules itself.
void poll_ps(Self* self);

}  // namespace troupe::actors::coordinator_steps
