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

/// `options` for a task of `cluster` whose address names `host` (empty: a host unknown,
/// only the job's size counts). Two adjustments, each only ever lengthening `options`':
/// - Heartbeats spaced by the job's size: every link carries one each way per interval,
///   and the chief (and each PS task) holds a link to every other task, so at 100 ms a
///   chief of 64 idle workers spent 8.5% of a core on them (most of it the tunnels' wake-ups,
///   docs/benchmarks.md). The interval is 100 ms per 32 tasks of the job (529 tasks: 1.65
///   s), the same in every task, as each one derives it from the same cluster; the
///   connection timeout is at least 10 intervals.
/// - CAF's connection timeout (a peer's silence tolerated before its link is dropped)
///   grown for a host that runs more than 4 of the job's tasks per core: there a task can
///   go unscheduled for longer than a second (measured: at 128 workers on 2 cores, half
///   the workers' links to the chief dropped at start-up), which is not a hang. By the
///   tasks per core over 4 (a second each), at most 30 s.
/// A process that dies is seen at once either way (its sockets close); only a hung or cut
/// off one waits for the timeout.
NodeOptions for_job(NodeOptions options, const ClusterSpec& cluster, const std::string& host,
                    unsigned cores);

}  // namespace troupe::net
