#pragma once

#include <chrono>
#include <string>

#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include "net/node_options.hpp"

namespace troupe::net {

/// Loads the middleman, registers Troupe's message types and error category, and turns
/// on heartbeats and connection timeouts.
void configure(caf::actor_system_config& cfg, const NodeOptions& options = {});

}  // namespace troupe::net
