#pragma once

// An actor system configured as a Troupe node, and a scoped actor to talk to actors under
// test, for the in-process actor tests.

#include <memory>

#include <caf/all.hpp>

#include "net/node.hpp"

namespace troupe::test {

struct ActorFixture {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  std::unique_ptr<caf::scoped_actor> self;
  ActorFixture() {
    net::configure(cfg);
    sys = std::make_unique<caf::actor_system>(cfg);
    self = std::make_unique<caf::scoped_actor>(*sys);
  }
};

}  // namespace troupe::test
