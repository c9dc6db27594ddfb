#pragma once

#include <chrono>
#include <string>

#include <caf/all.hpp>

#include "core/expected.hpp"

namespace troupe::net {

/// Connects to the actor published at `address` ("host:port"), retrying until `timeout`:
/// the task may still be starting, and a handshake can be dropped by a busy peer (seen on
/// a loaded two-core machine as `connection_timeout`). Blocks the calling thread, so call it
/// from a blocking actor or the main thread, never from an event-based actor. `task` names
/// the peer in the error.
core::Expected<caf::actor> connect_with_retry(caf::actor_system& sys, const std::string& address,
                                              const std::string& task,
                                              std::chrono::milliseconds timeout);

}  // namespace troupe::net
