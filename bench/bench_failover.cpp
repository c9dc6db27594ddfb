// How fast the coordinator reacts to a failed worker, run as a job under the launcher:
//
//   build/bin/troupe launch --ps 1 --workers 2 --restart-failed -- build/bin/bench_failover
//
// Each round, with worker 1 holding a closure (its step blocks), the chief kills worker 1
// (SIGKILL) and measures the time until the down message (`kill_to_detect_ms`) and until
// the same closure starts on worker 0 (`kill_to_rerun_ms`, from the step's own start time:
// both processes read the same monotonic clock). The launcher restarts worker 1; once it
// has rejoined, the chief stops it (SIGSTOP) and measures the time until it is declared
// lost (`stop_to_detect_ms`: missed heartbeats and the connection timeout), then resumes it.
// The baseline, measured in the same rounds, is the time from schedule() to a step's start
// on an idle worker (`dispatch_ms`). One JSON line per figure (median, min, max over the
// rounds), then a summary line.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <iostream>
#include <thread>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "bench_stats.hpp"
#include "core/json_text.hpp"
#include "examples/command_line.hpp"
#include "troupe/troupe.hpp"

using clock_type = std::chrono::steady_clock;
using troupe::bench::median;

namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(clock_type::now().time_since_epoch())
      .count();
}

double ms_between(int64_t from_ns, int64_t to_ns) {
  return static_cast<double>(to_ns - from_ns) / 1e6;
}

int fail(const std::string& what) {
  std::cerr << "bench_failover: " << what << std::endl;
  std::cout << troupe::core::json_text(
                   nlohmann::json{{"ok", false}, {"program", "bench_failover"}, {"error", what}})
            << std::endl;
  return 1;
}

troupe::Registry make_registry() {
  troupe::Registry r;
  // (worker index, pid): the chief signals workers by pid (all run on this host).
  r.add_step("ident", [](troupe::StepContext& ctx) {
    return std::vector<int64_t>{ctx.worker_index(), static_cast<int64_t>(::getpid())};
  });
  // The monotonic time at which the step started; on worker `hold` it then blocks for
  // `hold_ms` (a closure in flight there when the worker is killed).
  r.add_step("probe", [](troupe::StepContext& ctx, int hold, int hold_ms) {
    const int64_t started = now_ns();
    if (ctx.worker_index() == hold) std::this_thread::sleep_for(std::chrono::milliseconds(hold_ms));
    return started;
  });
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Failure detection and closure failover (run under troupe launch --restart-failed)"};
  int rounds = 7;
  app.add_option("--rounds", rounds)->check(CLI::Range(1, 100));
  if (auto end = troupe::examples::parse_command_line(app, argc, argv, "bench_failover"))
    return *end;

  const auto registry = make_registry();
  auto resolver = troupe::net::TFConfigClusterResolver::from_env();
  if (!resolver) return fail(resolver.error().to_string());
  if (resolver->task().type != "chief") {
    auto st = troupe::serve(*resolver, registry);
    if (!st) return fail(st.error().to_string());
    std::cout << troupe::core::json_text(
                     nlohmann::json{{"ok", true}, {"task", resolver->task().to_string()}})
              << std::endl;
    return 0;
  }
  auto strategy = troupe::ParameterServerStrategy::make(*resolver);
  if (!strategy) return fail(strategy.error().to_string());
  if ((*strategy)->num_workers() != 2) return fail("run it with --workers 2");
  troupe::CoordinatorOptions options;
  options.max_in_flight_per_worker = 1;  // two closures: one on each worker
  auto made = troupe::ClusterCoordinator::make(**strategy, options);
  if (!made) return fail(made.error().to_string());
  auto& coord = **made;
  const int victim = 1;
  const auto bound = std::chrono::seconds(30);

  // Worker 1's pid (it changes each time the launcher restarts it). Asked until `bound`
  // passes, not a number of times: a worker still being brought up (or rejoining) takes
  // nothing meanwhile, and on a loaded machine the other answers many rounds first.
  auto victim_pid = [&]() -> pid_t {
    const auto deadline = std::chrono::steady_clock::now() + bound;
    while (std::chrono::steady_clock::now() < deadline) {
      auto a = coord.schedule<std::vector<int64_t>>("ident");
      auto b = coord.schedule<std::vector<int64_t>>("ident");
      for (auto* v : {&a, &b}) {
        auto got = v->fetch();
        if (got && got->size() == 2 && (*got)[0] == victim) return static_cast<pid_t>((*got)[1]);
      }
    }
    return -1;
  };

  std::vector<double> dispatch, kill_detect, kill_rerun, stop_detect;
  for (int round = 0; round < rounds; ++round) {
    const auto stats = coord.stats();
    const pid_t pid = victim_pid();
    if (pid <= 0) return fail("worker 1 ran no closure");

    // Baseline: schedule() to the step's start on an idle worker.
    for (int i = 0; i < 5; ++i) {
      const int64_t t0 = now_ns();
      auto started = coord.schedule<int64_t>("probe", -1, 0).fetch();
      if (!started) return fail(started.error().to_string());
      dispatch.push_back(ms_between(t0, *started));
    }

    // A closure held on worker 1, the other one done on worker 0.
    const int64_t done_before = coord.stats().completed;
    auto a = coord.schedule<int64_t>("probe", victim, 600000);
    auto b = coord.schedule<int64_t>("probe", victim, 600000);
    if (!coord.wait_for_stats([&](const auto& s) { return s.completed == done_before + 1; },
                              bound)) {
      const auto now = coord.stats();
      return fail("no probe finished in " + std::to_string(bound.count()) + " s (completed " +
                  std::to_string(now.completed - done_before) + " of the 2, workers lost " +
                  std::to_string(now.workers_lost) + ", rejoins " +
                  std::to_string(now.worker_rejoins) + ")");
    }
    auto& held = a.ready() ? b : a;
    const int64_t t_kill = now_ns();
    ::kill(pid, SIGKILL);
    const int64_t lost = stats.workers_lost + 1;
    if (!coord.wait_for_stats([&](const auto& s) { return s.workers_lost >= lost; }, bound))
      return fail("the killed worker was not noticed");
    kill_detect.push_back(ms_between(t_kill, now_ns()));
    auto rerun = held.fetch();
    if (!rerun) return fail(rerun.error().to_string());
    kill_rerun.push_back(ms_between(t_kill, *rerun));

    // The launcher restarts worker 1; it rejoins, then is stopped.
    const int64_t rejoins = stats.worker_rejoins + 1;
    if (!coord.wait_for_stats([&](const auto& s) { return s.worker_rejoins >= rejoins; }, bound))
      return fail("the restarted worker did not rejoin (run under --restart-failed)");
    const pid_t restarted = victim_pid();
    if (restarted <= 0) return fail("the restarted worker ran no closure");
    const int64_t t_stop = now_ns();
    ::kill(restarted, SIGSTOP);
    const bool noticed =
        coord.wait_for_stats([&](const auto& s) { return s.workers_lost >= lost + 1; }, bound);
    const int64_t t_noticed = now_ns();
    ::kill(restarted, SIGCONT);
    if (!noticed) return fail("the stopped worker was not noticed");
    stop_detect.push_back(ms_between(t_stop, t_noticed));
    if (!coord.wait_for_stats([&](const auto& s) { return s.worker_rejoins >= rejoins + 1; },
                              bound))
      return fail("the resumed worker did not rejoin");
  }
  if (auto st = coord.join(); !st) return fail(st.error().to_string());

  nlohmann::json results = nlohmann::json::array();
  const double base = median(dispatch);
  auto emit = [&](const char* metric, const std::vector<double>& v) {
    nlohmann::json j{{"bench", "failover"},
                     {"metric", metric},
                     {"median", median(v)},
                     {"min", *std::min_element(v.begin(), v.end())},
                     {"max", *std::max_element(v.begin(), v.end())},
                     {"runs", v.size()},
                     {"ratio_to_dispatch", median(v) / base}};
    std::cout << troupe::core::json_text(j) << std::endl;
    results.push_back(std::move(j));
  };
  emit("dispatch_ms", dispatch);
  emit("kill_to_detect_ms", kill_detect);
  emit("kill_to_rerun_ms", kill_rerun);
  emit("stop_to_detect_ms", stop_detect);
  const auto s = coord.stats();
  coord.shutdown_cluster();
  std::cout << troupe::core::json_text(nlohmann::json{{"ok", true},
                                                      {"program", "bench_failover"},
                                                      {"rounds", rounds},
                                                      {"workers_lost", s.workers_lost},
                                                      {"worker_rejoins", s.worker_rejoins},
                                                      {"closures_retried", s.retried},
                                                      {"results", results}})
            << std::endl;
  return 0;
}
