// The public header is all a job needs, and it does not bring CAF's headers with it: a job
// compiles against Troupe's types, not the actor framework's (issue 18). This file is the
// check: it includes nothing else first, and does not build if CAF came along.
#include "troupe/troupe.hpp"

#ifdef CAF_VERSION
#error "troupe/troupe.hpp includes CAF's headers"
#endif

#include <catch2/catch.hpp>

TEST_CASE("troupe/troupe.hpp gives a job its types without CAF's headers", "[api]") {
  troupe::net::NodeOptions node;
  CHECK(node.heartbeat_interval.count() > 0);
  troupe::Registry registry;
  registry.add_step("noop", [](troupe::StepContext&) { return 0; });
  CHECK(registry.step("noop") != nullptr);
}
