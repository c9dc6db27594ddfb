#include <catch2/catch.hpp>

#include "core/expected.hpp"

using namespace troupe::core;

TEST_CASE("value() of an error throws that error instead of aborting", "[expected]") {
  Expected<int> missing = make_error(Errc::not_found, "no 'w' in the checkpoint");
  try {
    (void)missing.value();
    FAIL("value() of an error returned");
  } catch (const BadExpectedAccess& e) {
    CHECK(e.error().code == Errc::not_found);
    CHECK(e.error().message == "no 'w' in the checkpoint");
    CHECK_THAT(e.what(), Catch::Contains("not_found") && Catch::Contains("no 'w'"));
  }
  CHECK_THROWS_AS(*missing, BadExpectedAccess);
  CHECK_THROWS_AS(std::move(missing).value(), BadExpectedAccess);
  Expected<int> seven = 7;
  CHECK(seven.value() == 7);
  CHECK_THROWS_AS(seven.error(), BadExpectedAccess);
  CHECK_THROWS_AS(Status{}.error(), BadExpectedAccess);
}
