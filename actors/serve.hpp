#pragma once

#include <functional>
#include <string>

#include "core/expected.hpp"
#include "core/runtime/registry.hpp"
#include "net/cluster_spec.hpp"
#include "net/node.hpp"

namespace troupe::actors {

/// Runs this process's task of the cluster until it is told to shut down: for a "ps" task,
/// a ps_shard actor published on the task's address; for a "worker" task, a worker actor
/// running the steps of `registry`. Returns an error when the task cannot
/// be served (unknown role, address in use).
///
///   auto resolver = net::TFConfigClusterResolver::from_env();
///   if (resolver && resolver->task().type == "ps") return serve(*resolver, registry).ok() ? 0 : 1;
/// `on_ready` is called with the bound address once the task accepts connections. A
/// `stop`, asked every 100 ms, ends serving early when it says so (the process was
/// interrupted): the task shuts down as at a job's end and serve() returns `cancelled`.
core::Status serve(const net::ClusterResolver& resolver, const Registry& registry,
                   const net::NodeOptions& options = {},
                   const std::function<void(const std::string&)>& on_ready = {},
                   const std::function<bool()>& stop = {});

}  // namespace troupe::actors
