#pragma once

#include <chrono>
#include <string>

#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include "net/cluster_spec.hpp"
#include "net/node_options.hpp"

namespace troupe::net {

/// Loads the middleman, registers Troupe's message types and error category, and turns
/// on heartbeats and connection timeouts.
void configure(caf::actor_system_config& cfg, const NodeOptions& options = {});

/// `options` for a task of `cluster` whose address names `host`, with CAF's connection
/// timeout (a peer's silence tolerated before its link is dropped) grown for a host that
/// runs more than 4 of the job's tasks per core: there a task can go unscheduled for
/// longer than a second (measured: at 128 workers on 2 cores, half the workers' links to
/// the chief dropped at start-up), which is not a hang. By the tasks per core over 4 (a
/// second each), at most 30 s; a host of 4 or fewer tasks per core keeps `options`' own.
/// A process that dies is seen at once either way (its sockets close).
NodeOptions for_host_load(NodeOptions options, const ClusterSpec& cluster, const std::string& host,
                          unsigned cores);

}  // namespace troupe::net
