#pragma once

#include <chrono>
#include <functional>
#include <string>

#include <caf/all.hpp>

#include "core/expected.hpp"

namespace troupe::net {

/// True when `a` is a proxy (or actor) that has terminated: its node's connection was lost.
/// Messages to it vanish, and a request to it gets no answer before its own timeout, so
/// check before relying on a handle kept across a peer's failure.
bool is_terminated(const caf::actor& a);

/// Connects to the actor published at `address` ("host:port"), retrying until `timeout`:
/// the task may still be starting. Each try dials the socket itself and waits for the
/// peer's handshake (up to the deadline, within link_handshake_timeout()) before CAF takes
/// the connection: CAF 0.17.6 would give a connection it dials only until its next
/// heartbeat tick to be answered. A handle to a proxy already terminated (the previous
/// process at that address, its connection not yet dropped) counts as not connected. Blocks the
/// calling thread, so call it from a blocking actor or the main thread, never from an event-based
/// actor. `task` names the peer in the error.
/// `give_up`, when set, is asked after each failed attempt: true ends the tries at once (the
/// caller learned meanwhile that the task is gone for good, say a failed-over PS task).
///
/// `patience`, when set, counts from the last sign of life instead of from the start: an
/// attempt that shows the process runs but failed (through a tunnel, the task proved the
/// secret; directly, it closed the connection before its handshake: a live process too
/// busy to finish, as 100 tasks dialling one PS at start-up make it) moves the deadline to
/// `patience.window` from then, within `patience.cap` of the start. A refusal (nobody
/// listening) or a silent connection (a stopped process's kernel accepts it) is not one.
struct Patience {
  std::chrono::milliseconds window{0};
  std::chrono::milliseconds cap{0};
};
core::Expected<caf::actor> connect_with_retry(caf::actor_system& sys, const std::string& address,
                                              const std::string& task,
                                              std::chrono::milliseconds timeout,
                                              const std::function<bool()>& give_up = {},
                                              Patience patience = {});

}  // namespace troupe::net
