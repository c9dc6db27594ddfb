#include <catch2/catch.hpp>

#include "tools/chaos.hpp"

using namespace troupe::tools;

TEST_CASE("Chaos specs parse as documented", "[chaos]") {
  auto k = parse_chaos("kill:worker:1@5s");
  REQUIRE(k.ok());
  CHECK(k->action == ChaosEvent::Action::kill);
  CHECK(k->task == troupe::net::TaskId{"worker", 1});
  CHECK(k->at == std::chrono::milliseconds(5000));
  auto s = parse_chaos("stop:worker:0@3s+2s");
  REQUIRE(s.ok());
  CHECK(s->action == ChaosEvent::Action::stop);
  CHECK(s->duration == std::chrono::milliseconds(2000));
  CHECK(parse_chaos("kill:ps:0@1.5s")->at == std::chrono::milliseconds(1500));
  CHECK(parse_chaos("kill:ps:0@800ms")->at == std::chrono::milliseconds(800));
}

TEST_CASE("Malformed chaos specs are clear errors", "[chaos]") {
  for (const char* bad :
       {"kill:worker:1", "nuke:worker:1@1s", "kill:trainer:0@1s", "kill:worker:x@1s",
        "kill:worker:1@5", "stop:worker:0@1s", "kill:worker:0@1s+2s", "kill@1s"}) {
    auto r = parse_chaos(bad);
    INFO(bad);
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.error().message, Catch::Contains(bad));
  }
}
