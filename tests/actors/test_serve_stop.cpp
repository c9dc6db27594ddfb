// serve()'s stop predicate: a PS or worker task serving in this process ends when it says
// so (what a Python task's Server.join() does on Ctrl-C), as at a job's end, and serve()
// gives `cancelled`. No chief ever comes: without the predicate it would serve forever.
#include <catch2/catch.hpp>

#include <atomic>
#include <future>
#include <string>

#include "actors/serve.hpp"
#include "process.hpp"

using namespace troupe;
using namespace std::chrono_literals;

TEST_CASE("serve() stops when its stop predicate says so and gives cancelled", "[serve]") {
  for (const std::string role : {"ps", "worker"}) {
    INFO(role);
    const auto addresses = test::loopback_addresses(3);
    const net::ClusterSpec spec(
        {{"chief", {addresses[0]}}, {"ps", {addresses[1]}}, {"worker", {addresses[2]}}});
    const net::SimpleClusterResolver resolver(spec, {role, 0});
    const Registry registry;
    std::promise<void> ready;
    std::atomic<bool> stop{false};
    std::atomic<int> asked{0};
    auto served = std::async(std::launch::async, [&] {
      return actors::serve(
          resolver, registry, {}, [&](const std::string&) { ready.set_value(); },
          [&] {
            ++asked;
            return stop.load();
          });
    });
    struct StopOnExit {  // a failed check still ends the task (the future's end waits)
      std::atomic<bool>& stop;
      ~StopOnExit() { stop = true; }
    } stop_on_exit{stop};
    REQUIRE(ready.get_future().wait_for(30s) == std::future_status::ready);
    // It serves, asking meanwhile, until told.
    REQUIRE(served.wait_for(300ms) == std::future_status::timeout);
    CHECK(asked.load() >= 1);
    stop = true;
    REQUIRE(served.wait_for(30s) == std::future_status::ready);
    const core::Status st = served.get();
    REQUIRE_FALSE(st.ok());
    CHECK(st.error().code == core::Errc::cancelled);
    CHECK_THAT(st.error().message, Catch::Contains("task " + role + ":0"));
  }
}
