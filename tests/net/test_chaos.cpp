#include <catch2/catch.hpp>

#include <sys/wait.h>

#include <algorithm>
#include <fstream>

#include "helpers.hpp"
#include "process.hpp"
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

TEST_CASE("ChaosInjector signals the tasks' processes on time and resumes what it stopped",
          "[chaos][process]") {
  using namespace std::chrono_literals;
  troupe::test::ChildProcess w0({"/bin/sleep", "30"}, {}), w1({"/bin/sleep", "30"}, {});
  pid_t current_w1 = w1.pid();
  auto pid_of = [&](const troupe::net::TaskId& t) -> pid_t {
    if (t.type != "worker") return -1;  // no such process: logged as missed
    return t.index == 0 ? w0.pid() : current_w1;
  };
  ChaosInjector chaos(
      {parse_chaos("kill:worker:0@0s").value(), parse_chaos("stop:worker:1@0s+200ms").value(),
       parse_chaos("kill:ps:0@0s").value()},
      pid_of);
  CHECK(chaos.run_due() == 3);
  CHECK(chaos.injections() == 2);
  auto killed = w0.wait_exit(5s);
  REQUIRE(killed.has_value());
  CHECK((WIFSIGNALED(*killed) && WTERMSIG(*killed) == SIGKILL));
  siginfo_t info{};
  REQUIRE(::waitid(P_PID, static_cast<id_t>(w1.pid()), &info, WSTOPPED) == 0);
  CHECK(info.si_code == CLD_STOPPED);
  REQUIRE(chaos.next_due().has_value());  // the resume

  // The resume goes to the process that was stopped, whatever pid_of says by then.
  current_w1 = -1;
  REQUIRE(chaos.run_until_done(5s));
  REQUIRE(::waitid(P_PID, static_cast<id_t>(w1.pid()), &info, WCONTINUED) == 0);
  CHECK(info.si_code == CLD_CONTINUED);
  CHECK_FALSE(chaos.next_due().has_value());

  const auto& log = chaos.log();
  REQUIRE(log.size() == 4);
  std::vector<std::string> actions;
  for (const auto& e : log)
    actions.push_back(e["action"].get<std::string>());
  CHECK(std::count(actions.begin(), actions.end(), "kill") == 1);
  CHECK(std::count(actions.begin(), actions.end(), "missed") == 1);
  CHECK(actions.back() == "cont");
  CHECK(log.back()["pid"] == w1.pid());
  CHECK(log.back()["task"] == "worker:1");

  // An injector that ends before a stop's duration resumes the process.
  current_w1 = w1.pid();
  {
    ChaosInjector longer({parse_chaos("stop:worker:1@0s+60s").value()}, pid_of);
    REQUIRE(longer.run_due() == 1);
    REQUIRE(::waitid(P_PID, static_cast<id_t>(w1.pid()), &info, WSTOPPED) == 0);
  }
  REQUIRE(::waitid(P_PID, static_cast<id_t>(w1.pid()), &info, WCONTINUED) == 0);
  CHECK(info.si_code == CLD_CONTINUED);
}

TEST_CASE(
    "read_task_pids and read_task_listing read a launch run directory and refuse a damaged one",
    "[chaos]") {
  troupe::test::TempDir dir;
  std::ofstream(dir.file("tasks.json"))
      << R"([{"type":"chief","index":0,"address":"127.0.0.1:1","pid":41},)"
      << R"({"type":"worker","index":1,"address":"127.0.0.1:2","pid":42}])";
  auto pids = read_task_pids(dir.path());
  REQUIRE(pids.ok());
  CHECK(pids->at("chief:0") == 41);
  CHECK(pids->at("worker:1") == 42);
  auto listing = read_task_listing(dir.path());  // what troupe export --job dials
  REQUIRE(listing.ok());
  REQUIRE(listing->size() == 2);
  CHECK((*listing)[1].id.to_string() == "worker:1");
  CHECK((*listing)[1].address == "127.0.0.1:2");
  std::ofstream(dir.file("tasks.json")) << R"([{"type":"chief","index":0}])";
  auto bad = read_task_pids(dir.path());
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.error().message, Catch::Contains("tasks.json"));
  CHECK(read_task_pids(dir.file("nowhere")).error().code == troupe::core::Errc::not_found);
}
