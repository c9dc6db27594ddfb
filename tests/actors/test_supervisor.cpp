// Supervisors: restart strategies, policies, intensity limits and escalation up a tree,
// with small actors as children (killed by exit messages, as a crash looks to CAF).
#include <catch2/catch.hpp>

#include <condition_variable>
#include <mutex>

#include "actor_fixture.hpp"
#include "actors/supervisor.hpp"
#include "net/node.hpp"
#include "net/wire.hpp"

using namespace troupe;
using namespace troupe::actors;
using namespace std::chrono_literals;

namespace {

caf::behavior toy(caf::event_based_actor* self) {
  return {
      [](caf::ok_atom) { return caf::ok_atom::value; },
      [=](net::shutdown_atom) { self->quit(); },  // a normal exit
  };
}

ChildSpec toy_spec(const std::string& name, RestartPolicy policy = RestartPolicy::permanent) {
  return {name, [](caf::actor_system& sys) -> core::Expected<caf::actor> { return sys.spawn(toy); },
          policy};
}

// Counts the restarts a supervisor reports, for bounded waits.
struct Events {
  std::mutex mu;
  std::condition_variable cv;
  int64_t restarts = 0;
  bool gave_up = false;
  std::function<void(const std::string&, int64_t)> hook() {
    return [this](const std::string& child, int64_t n) {
      std::lock_guard<std::mutex> lock(mu);
      if (child.empty()) gave_up = true;
      restarts = n;
      cv.notify_all();
    };
  }
  bool wait_restarts(int64_t n) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, 5s, [&] { return restarts >= n; });
  }
};

struct SupervisorFixture : test::ActorFixture {
  caf::actor which(const caf::actor& sup, const std::string& name) {
    caf::actor out;
    (*self)
        ->request(sup, 5s, which_atom::value, name)
        .receive([&](caf::actor& a) { out = a; }, [](caf::error&) {});
    return out;
  }
  // Waits for the down message of `a` (monitored before); its reason.
  caf::error wait_down(const caf::actor& a) {
    caf::error reason = caf::make_error(caf::sec::request_timeout);
    bool done = false;
    while (!done)
      (*self)->receive(
          [&](caf::down_msg& dm) {
            if (dm.source == a.address()) {
              reason = dm.reason;
              done = true;
            }
          },
          caf::after(5s) >> [&] { done = true; });
    return reason;
  }
};

}  // namespace

TEST_CASE("one_for_one restarts only the failed child", "[supervisor]") {
  SupervisorFixture f;
  Events ev;
  SupervisorOptions o;
  o.on_restart = ev.hook();
  auto sup = f.sys->spawn(supervisor, std::vector<ChildSpec>{toy_spec("a"), toy_spec("b")}, o);
  const auto a = f.which(sup, "a"), b = f.which(sup, "b");
  REQUIRE(a);
  REQUIRE(b);
  caf::anon_send_exit(a, caf::exit_reason::kill);
  REQUIRE(ev.wait_restarts(1));
  const auto a2 = f.which(sup, "a");
  REQUIRE(a2);
  CHECK(a2 != a);
  CHECK(f.which(sup, "b") == b);
  // The new child serves.
  bool answered = false;
  (*f.self)
      ->request(a2, 5s, caf::ok_atom::value)
      .receive([&](caf::ok_atom) { answered = true; }, [](caf::error&) {});
  CHECK(answered);
  caf::anon_send_exit(sup, caf::exit_reason::user_shutdown);
}

TEST_CASE("one_for_all and rest_for_one restart the children that depend on the failed one",
          "[supervisor]") {
  SupervisorFixture f;
  for (auto strategy : {RestartStrategy::one_for_all, RestartStrategy::rest_for_one}) {
    Events ev;
    SupervisorOptions o;
    o.strategy = strategy;
    o.on_restart = ev.hook();
    auto sup = f.sys->spawn(supervisor,
                            std::vector<ChildSpec>{toy_spec("a"), toy_spec("b"), toy_spec("c")}, o);
    const auto a = f.which(sup, "a"), b = f.which(sup, "b"), c = f.which(sup, "c");
    (*f.self)->monitor(a);
    caf::anon_send_exit(b, caf::exit_reason::kill);
    REQUIRE(ev.wait_restarts(1));
    CHECK(f.which(sup, "b") != b);
    CHECK(f.which(sup, "c") != c);
    if (strategy == RestartStrategy::one_for_all) {
      CHECK(f.which(sup, "a") != a);
      CHECK(f.wait_down(a) == caf::exit_reason::user_shutdown);  // stopped, not killed
    } else {
      CHECK(f.which(sup, "a") == a);
    }
    caf::anon_send_exit(sup, caf::exit_reason::user_shutdown);
  }
}

TEST_CASE("Restart policies: transient children may end normally, temporary ones are forgotten",
          "[supervisor]") {
  SupervisorFixture f;
  Events ev;
  SupervisorOptions o;
  o.on_restart = ev.hook();
  auto sup =
      f.sys->spawn(supervisor,
                   std::vector<ChildSpec>{toy_spec("t", RestartPolicy::transient),
                                          toy_spec("tmp", RestartPolicy::temporary), toy_spec("p")},
                   o);
  auto t = f.which(sup, "t");
  (*f.self)->monitor(t);
  (*f.self)->send(t, net::shutdown_atom::value);
  CHECK(f.wait_down(t) == caf::exit_reason::normal);
  auto tmp = f.which(sup, "tmp");
  caf::anon_send_exit(tmp, caf::exit_reason::kill);
  // A permanent child's restart is the marker that the two exits above were handled.
  caf::anon_send_exit(f.which(sup, "p"), caf::exit_reason::kill);
  REQUIRE(ev.wait_restarts(1));
  CHECK_FALSE(f.which(sup, "t"));    // ended normally, not restarted
  CHECK_FALSE(f.which(sup, "tmp"));  // killed, not restarted
  std::vector<int64_t> stats;
  (*f.self)
      ->request(sup, 5s, net::stats_atom::value)
      .receive([&](std::vector<int64_t>& s) { stats = s; }, [](caf::error&) {});
  CHECK(stats == std::vector<int64_t>{1, 1});  // one restart; only "p" runs
  caf::anon_send_exit(sup, caf::exit_reason::user_shutdown);
}

TEST_CASE("Past its intensity a supervisor gives up, stops its children, and escalates",
          "[supervisor]") {
  SupervisorFixture f;
  Events inner_ev, outer_ev;
  // outer (intensity 1) supervises inner (intensity 1) which supervises "job".
  SupervisorOptions inner_o;
  inner_o.name = "inner";
  inner_o.intensity = 1;
  inner_o.period = 10s;
  inner_o.on_restart = inner_ev.hook();
  SupervisorOptions outer_o;
  outer_o.name = "outer";
  outer_o.intensity = 1;
  outer_o.period = 10s;
  outer_o.on_restart = outer_ev.hook();
  ChildSpec inner{"inner", [inner_o](caf::actor_system& sys) -> core::Expected<caf::actor> {
                    return sys.spawn(supervisor, std::vector<ChildSpec>{toy_spec("job")}, inner_o);
                  }};
  auto outer = f.sys->spawn(supervisor, std::vector<ChildSpec>{inner}, outer_o);
  (*f.self)->monitor(outer);
  auto job_of = [&] { return f.which(f.which(outer, "inner"), "job"); };

  // First failure: inner restarts the job itself.
  auto job = job_of();
  REQUIRE(job);
  caf::anon_send_exit(job, caf::exit_reason::kill);
  REQUIRE(inner_ev.wait_restarts(1));
  // Second within the period: inner gives up; outer restarts inner, with a fresh job.
  const auto inner1 = f.which(outer, "inner");
  job = job_of();
  (*f.self)->monitor(job);
  caf::anon_send_exit(job, caf::exit_reason::kill);
  REQUIRE(outer_ev.wait_restarts(1));
  CHECK(f.which(outer, "inner") != inner1);
  // Third: the new inner restarts (its count starts over); fourth: it gives up again, and
  // outer, past its own intensity, gives up too.
  caf::anon_send_exit(job_of(), caf::exit_reason::kill);
  auto last = job_of();
  for (int i = 0; i < 50 && (!last || last == job); ++i)
    last = job_of();
  REQUIRE(last);
  caf::anon_send_exit(last, caf::exit_reason::kill);
  const caf::error reason = f.wait_down(outer);
  const core::Error e = net::from_caf(reason);
  CHECK(e.code == core::Errc::unavailable);
  CHECK_THAT(e.message, Catch::Contains("outer gave up") && Catch::Contains("child 'inner'") &&
                            Catch::Contains("within 10000 ms"));
}
