#include <chrono>
#include <future>
#include <string>

#include <catch2/catch.hpp>

#include "actor_fixture.hpp"
#include "net/ask.hpp"

using namespace troupe;

namespace {

using echo_atom = caf::atom_constant<caf::atom("echo")>;
using hold_atom = caf::atom_constant<caf::atom("hold")>;
using fail_atom = caf::atom_constant<caf::atom("fail")>;

// Echoes a number; holds a `hold` request until released (a stuck handler, as a shard in
// slow disk I/O or a dataset function that never returns); answers `fail` with an error.
caf::behavior answerer(caf::event_based_actor* self, std::shared_future<void> release) {
  return {
      [](echo_atom, int x) { return x; },
      [=](hold_atom, int x) {
        release.wait();
        return x;
      },
      [](fail_atom) -> caf::result<int> {
        return net::to_caf(core::make_error(core::Errc::not_found, "no such thing"));
      },
  };
}

}  // namespace

TEST_CASE("ask waits a bounded time and a late answer never reaches a later ask", "[ask]") {
  test::ActorFixture f;
  std::promise<void> release;
  auto actor = f.sys->spawn<caf::detached>(answerer, release.get_future().share());
  int got = 0;
  auto on_int = [&](int x) { got = x; };

  REQUIRE(net::ask(**f.self, actor, {std::chrono::seconds(10), "echo"}, on_int, echo_atom::value, 7)
              .ok());
  CHECK(got == 7);

  // No answer in time: an error naming the call and its bound, and the handler not run.
  got = 0;
  bool timed_out = false;
  auto st =
      net::ask(**f.self, actor, {std::chrono::milliseconds(50), "asking the stuck one", &timed_out},
               on_int, hold_atom::value, 1);
  REQUIRE_FALSE(st.ok());
  CHECK(st.error().code == core::Errc::unavailable);
  CHECK_THAT(st.error().message,
             Catch::Contains("asking the stuck one") && Catch::Contains("no answer within 50 ms"));
  CHECK(got == 0);
  CHECK(timed_out);

  // Released, the actor answers the held request (1) and then this one (2): only 2 is
  // this call's answer.
  release.set_value();
  REQUIRE(net::ask(**f.self, actor, {std::chrono::seconds(10), "echo"}, on_int, echo_atom::value, 2)
              .ok());
  CHECK(got == 2);

  // The destination's own error comes back as it is.
  st = net::ask(**f.self, actor, {std::chrono::seconds(10), "fail"}, on_int, fail_atom::value);
  REQUIRE_FALSE(st.ok());
  CHECK(st.error().code == core::Errc::not_found);
  CHECK_THAT(st.error().message, Catch::Contains("no such thing"));

  // An actor that has ended answers at once with CAF's error, not after the bound.
  timed_out = false;
  caf::anon_send_exit(actor, caf::exit_reason::user_shutdown);
  (*f.self)->wait_for(actor);
  st = net::ask(**f.self, actor, {std::chrono::seconds(60), "echo", &timed_out}, on_int,
                echo_atom::value, 3);
  REQUIRE_FALSE(st.ok());
  CHECK_THAT(st.error().message, !Catch::Contains("no answer within"));
  CHECK_FALSE(timed_out);
}
