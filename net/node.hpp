#pragma once

#include <chrono>

#include <caf/all.hpp>
#include <caf/io/all.hpp>

namespace troupe::net {

/// Settings every Troupe node uses. Heartbeats must be on at both ends of every
/// connection: a node that times out idle peers but sends no heartbeats itself would drop
/// healthy peers (measured, ../shared/notes/caf-0.17.md).
struct NodeOptions {
  std::chrono::milliseconds heartbeat_interval{100};
  std::chrono::milliseconds connection_timeout{1000};
};

/// Loads the middleman, registers Troupe's message types and error category, and turns
/// on heartbeats and connection timeouts.
void configure(caf::actor_system_config& cfg, const NodeOptions& options = {});

}  // namespace troupe::net
