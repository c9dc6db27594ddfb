// An installed Troupe serves a job built outside the tree: cmake --install, then
// find_package(Troupe) and Troupe::api in tests/install/job, run under the installed
// troupe launch (tests/install/run.sh).
#include <catch2/catch.hpp>

#include "launch_helpers.hpp"
#include "run_program.hpp"

TEST_CASE("A job built against the installed package trains under the installed troupe launch",
          "[example][install]") {
  auto r = troupe::test::run_program(TROUPE_SOURCE_DIR "/tests/install/run.sh " TROUPE_BUILD_DIR);
  INFO(r.output);
  CHECK(r.exit_code == 0);
  REQUIRE(r.last_json.is_object());
  CHECK(r.last_json["ok"] == true);
  const auto& chief = r.last_json["chief"];
  REQUIRE(chief.is_object());
  CHECK(chief["ok"] == true);
  // 40 closures, each one SGD step of 0.25 on a gradient of ones, all applied once.
  CHECK(chief["closures"] == 40);
  CHECK(chief["v"].get<double>() == Approx(-10.0));
  CHECK(r.last_json["tasks"].size() == 4);
  for (const auto& t : r.last_json["tasks"])
    CHECK(t["exit"] == 0);
  troupe::test::check_all_gone(r.last_json["tasks"]);
}
