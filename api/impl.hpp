#pragma once

// The CAF side of the public API, shared by strategy.cpp and coordinator.cpp.

#include <memory>
#include <optional>

#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include "actors/coordinator.hpp"
#include "net/connect.hpp"
#include "net/node.hpp"
#include "net/wire.hpp"
#include "troupe/coordinator.hpp"
#include "troupe/strategy.hpp"

namespace troupe {

struct ParameterServerStrategy::Impl {
  std::unique_ptr<caf::actor_system_config> cfg;
  std::unique_ptr<caf::actor_system> sys;
  std::optional<caf::scoped_actor> self;
  net::ClusterSpec spec;
  std::shared_ptr<const core::Partitioner> partitioner;
  Options options;
  std::vector<caf::actor> ps;
  std::vector<net::Placement> placements;
  int next_ps = 0;  // round-robin start for the next variable
};

struct ClusterCoordinator::Impl {
  ParameterServerStrategy& strategy;
  Options options;
  std::shared_ptr<actors::ClosureBook> book;
  caf::actor coordinator;
};

}  // namespace troupe
