#pragma once

/// Troupe's user-facing surface.
///
///   troupe::Registry registry;            // the same in every process of the job
///   registry.add_step("train_step", train_step);
///   auto resolver = troupe::net::TFConfigClusterResolver::from_env().value();
///   if (resolver.task().type != "chief") return troupe::serve(resolver, registry).ok() ? 0 : 1;
///   auto strategy = troupe::ParameterServerStrategy::make(resolver).value();
///   auto coord = troupe::ClusterCoordinator::make(*strategy).value();

#include <functional>

#include "core/expected.hpp"
#include "net/cluster_spec.hpp"
#include "net/node_options.hpp"
#include "troupe/backup.hpp"
#include "troupe/callbacks.hpp"
#include "troupe/coordinator.hpp"
#include "troupe/evaluator.hpp"
#include "troupe/exit_codes.hpp"
#include "troupe/export.hpp"
#include "troupe/fit.hpp"
#include "troupe/mirrored_strategy.hpp"
#include "troupe/model.hpp"
#include "troupe/registry.hpp"
#include "troupe/remote_value.hpp"
#include "troupe/step_context.hpp"
#include "troupe/strategy.hpp"

namespace troupe {

/// Serves this process's ps or worker task until the chief shuts the cluster down.
/// `options` are the node's settings (heartbeats, scheduler, tensor channel on or off).
/// `stop`, asked every 100 ms, ends serving early when it says so (a process that saw
/// Ctrl-C, say): the task shuts down as at the job's end and serve() returns `cancelled`.
core::Status serve(const net::ClusterResolver& resolver, const Registry& registry,
                   const net::NodeOptions& options = {}, const std::function<bool()>& stop = {});

}  // namespace troupe
