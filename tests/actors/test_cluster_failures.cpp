// The same real cluster as test_cluster_process.cpp: timeouts, lost and restarted
// workers, the watchdog, a chief's backup, and a dead PS.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "helpers.hpp"
#include "ps_cluster.hpp"

using namespace troupe;
using namespace std::chrono_literals;
using test::workers_serving;

TEST_CASE("Parameter-server training across processes: failures and recovery",
          "[process][cluster]") {
  // Every section runs with tensors through the tensor channel and as CAF messages.
  const bool channel = GENERATE(true, false);
  CAPTURE(channel);
  // Outlives the cluster: a step cancelled while it waits on a file here still finds it.
  test::TempDir held_dir;
  test::PsCluster f(channel);
  const net::ClusterSpec& spec = f.cluster.spec();
  auto& children = f.cluster.children();
  auto& strategy = f.strategy;
  auto& v = *f.v;
  auto& reports = f.reports;
  auto& reports_mu = f.reports_mu;
  ClusterCoordinator& c = *f.coord;
  (void)spec, (void)children, (void)v, (void)reports, (void)reports_mu;

  SECTION("closure_timeout counts from when the worker starts the closure") {
    // 8 closures of 400 ms on 2 workers: the last on each waits ~1.2 s in its mailbox,
    // beyond the 1 s timeout, while none runs longer than 400 ms. None is lost.
    CoordinatorOptions o;
    o.closure_timeout = 1000ms;
    auto timed = ClusterCoordinator::make(**strategy, o).value();
    std::vector<RemoteValue<int>> runs;
    for (int i = 0; i < 8; ++i)
      runs.push_back(timed->schedule<int>("busy_ms", 400));
    REQUIRE(timed->join().ok());
    for (auto& r : runs)
      CHECK(r.fetch().ok());
    CHECK(timed->stats().workers_lost == 0);
    CHECK(timed->stats().retried == 0);
  }

  SECTION("A late error from a lost connection does not drop the worker that rejoined") {
    // A dataset request to a stopped worker: the worker is lost (heartbeats) and skipped;
    // it resumes and rejoins; then the old request times out. That error belongs to the
    // old connection and must be ignored.
    CoordinatorOptions o;
    o.closure_timeout = 3000ms;
    auto timed = ClusterCoordinator::make(**strategy, o).value();
    REQUIRE(timed->create_per_worker_dataset("ints").ok());
    auto& w1 = children[3];
    w1->kill(SIGSTOP);
    CHECK(timed->create_per_worker_dataset("blobs_train").ok());  // worker 1 skipped
    const bool lost =
        timed->wait_for_stats([](const auto& st) { return st.workers_lost == 1; }, 10s);
    w1->kill(SIGCONT);
    REQUIRE(lost);
    REQUIRE(timed->wait_for_stats([](const auto& st) { return st.worker_rejoins == 1; }, 15s));
    // Past the old request's 3 s timeout: still one loss.
    CHECK_FALSE(timed->wait_for_stats([](const auto& st) { return st.workers_lost > 1; }, 4s));
    CHECK(workers_serving(*timed) == std::set<int>{0, 1});
  }

  SECTION("A closure that crashes every worker it runs on fails the job") {
    CoordinatorOptions o;
    o.max_closure_losses = 2;
    auto guarded = ClusterCoordinator::make(**strategy, o).value();
    auto crash = guarded->schedule<int>("crash");
    auto st = guarded->join();  // instead of waiting for workers that crash again
    REQUIRE_FALSE(st.ok());
    CHECK(st.error().code == core::Errc::internal);  // permanent: a restart would crash again
    CHECK_THAT(st.error().message,
               Catch::Contains("'crash'") && Catch::Contains("lost its worker 2 times"));
    CHECK(crash.fetch().error().code == core::Errc::internal);
    CHECK(guarded->stats().workers_lost == 2);
    for (size_t k : {2, 3})
      REQUIRE(children[k]->wait_exit(10s).has_value());
  }

  SECTION("A NaN caught by check_numerics cancels what is pending and is raised once") {
    std::vector<RemoteValue<double>> before, after;
    for (int i = 0; i < 5; ++i)
      before.push_back(c.schedule<double>("checked_step", std::string("v"), 0.0f));
    REQUIRE(c.join().ok());
    const core::Tensor value = (*strategy)->read(*v).value();
    // One worker is held, so the closures after the NaN cannot all run on it before the
    // error comes back from the other (they did once, under the sanitizers): those sent
    // to the held worker, and those still queued, are pending when the error comes.
    auto held = c.schedule<bool>("held", held_dir.path(), std::string("release"));
    auto nan = c.schedule<double>("checked_step", std::string("v"), std::nanf(""));
    for (int i = 0; i < 100; ++i)
      after.push_back(c.schedule<double>("checked_step", std::string("v"), 1.0f));
    auto st = c.join();
    std::ofstream(held_dir.file("release")) << "go\n";  // the held step may end now
    CHECK(held.fetch().error().code == core::Errc::cancelled);
    REQUIRE_FALSE(st.ok());
    CHECK(st.error().code == core::Errc::invalid_argument);
    CHECK_THAT(st.error().message, Catch::Contains("not finite"));
    CHECK(nan.fetch().error().code == core::Errc::invalid_argument);
    int cancelled = 0, ran = 0, refused = 0;
    for (auto& a : after) {
      auto r = a.fetch();
      if (r.ok()) {
        ++ran;  // already in flight on the other worker when the error came back
      } else if (r.error().code == core::Errc::cancelled) {
        ++cancelled;
      } else {
        CHECK_THAT(r.error().message, Catch::Contains("not finite"));  // refused: pending
        ++refused;
      }
    }
    CHECK(cancelled + 1 == c.stats().cancelled);  // and the held one
    CHECK(cancelled + refused > 0);
    // The NaN never reached the variable, and every closure that returned a result pushed
    // its gradient of ones (SGD, lr 0.5). Closures already waiting in a worker's mailbox
    // when the error came may have pushed too, without a result.
    const core::Tensor now = (*strategy)->read(*v).value();
    for (int64_t i = 0; i < now.size(); ++i) {
      CHECK(std::isfinite(now[i]));
      CHECK(now[i] <= value[i] - 0.5f * static_cast<float>(ran) + 1e-3f);
    }
    CHECK(c.join().ok());  // raised once
    CHECK(c.stats().failed == 1);
  }

  SECTION("The watchdog reports a closure that does not finish, and where it runs") {
    REQUIRE(c.schedule<int>("add", 1, 1).fetch().value() == 2);
    const int64_t before = c.stats().watchdog_reports;
    CHECK(before == 0);  // nothing pending, nothing reported
    test::TempDir dir;
    const auto scheduled = std::chrono::steady_clock::now();
    auto held = c.schedule<bool>("held", dir.path(), std::string("release"));
    REQUIRE(c.wait_for_stats([&](const auto& s) { return s.watchdog_reports > before; }, 5s));
    WatchdogReport r;
    std::chrono::steady_clock::time_point came;
    {
      std::lock_guard<std::mutex> lock(reports_mu);
      REQUIRE(!reports.empty());
      r = reports.back();
      came = f.report_times.back();
    }
    CHECK(r.since_progress >= 400ms);
    CHECK(r.queued == 0);
    REQUIRE(r.workers.size() == 2);
    int holding = 0;
    for (const auto& w : r.workers)
      for (const auto& f : w.in_flight) {
        ++holding;
        CHECK(f.step == "held");
        // Counted from when it was sent: after it was scheduled (not from the coordinator's
        // start or the last closure), and not before the time without progress began.
        // (How soon after is up to the machine's load: no lower bound but zero.)
        CHECK(f.age > 0ms);
        CHECK(f.age <= came - scheduled);
        CHECK(f.age <= r.since_progress);
      }
    CHECK(holding == 1);
    CHECK_THAT(r.to_string(), Catch::Contains("held") && Catch::Contains("no closure finished"));
    std::ofstream(dir.file("release")) << "go\n";  // the step may finish now
    CHECK(held.fetch().value());
    CHECK(c.join().ok());
    CHECK(c.stats().workers_lost == 0);
  }

  SECTION("A restarted chief's backup puts variables, optimizer slots and counters back") {
    test::TempDir dir;
    auto m = (*strategy)->create_variable(
        "m", core::Shape{3, 2}, {core::Initializer::Kind::constant, 0.0f, 0}, "momentum", 0.1f);
    REQUIRE(m.ok());
    auto first = BackupAndRestore::make(**strategy, dir.path()).value();
    CHECK(first->incarnation() == 1);
    // Workers learn the placement when a coordinator is made: one for the new variable.
    CoordinatorOptions original;
    original.incarnation = first->incarnation();
    auto c1 = ClusterCoordinator::make(**strategy, original).value();
    CHECK_FALSE(first->restore().value().has_value());  // nothing backed up yet
    auto push = [&](ClusterCoordinator& co) {
      auto r = co.schedule<double>("ones_step", std::string("m"));
      auto joined = co.join();
      INFO((joined.ok() ? std::string() : joined.error().to_string()));
      REQUIRE(joined.ok());
      REQUIRE(r.fetch().ok());
    };
    for (int i = 0; i < 3; ++i)
      push(*c1);
    REQUIRE(first->backup({1, 3}).ok());
    push(*c1);  // the fourth update, from the backed-up state
    const core::Tensor after_fourth = (*strategy)->read(*m).value();
    for (int i = 0; i < 3; ++i)
      push(*c1);  // what the chief did after its backup, before it "died"
    CHECK(core::max_abs_diff((*strategy)->read(*m).value(), after_fourth) > 0.0f);

    // The restarted chief: the next incarnation, the backup's counters, and the variables
    // as backed up. Its closure ids start at (2 << 32) + 1, unlike every id applied so far.
    auto second = BackupAndRestore::make(**strategy, dir.path()).value();
    CHECK(second->incarnation() == 2);
    auto at = second->restore();
    REQUIRE(at.ok());
    REQUIRE(at->has_value());
    CHECK((*at)->epoch == 1);
    CHECK((*at)->step == 3);
    CoordinatorOptions restarted;
    restarted.incarnation = second->incarnation();
    auto c2 = ClusterCoordinator::make(**strategy, restarted).value();
    push(*c2);
    // The same value as the first fourth update only if the momentum slot and iteration
    // count came back too and the shards applied the new chief's closure.
    CHECK(core::max_abs_diff((*strategy)->read(*m).value(), after_fourth) == 0.0f);

    // Why incarnations: a chief whose ids repeat the first chief's has its updates taken
    // for ones the shards applied before, and ignored.
    const core::Tensor before = (*strategy)->read(*m).value();
    auto c3 = ClusterCoordinator::make(**strategy, original).value();
    push(*c3);
    CHECK(core::max_abs_diff((*strategy)->read(*m).value(), before) == 0.0f);

    // A backup that does not match the job's variables is refused, and nothing changes.
    auto late = (*strategy)->create_variable("late", core::Shape{2}, {}, "sgd", 0.1f);
    REQUIRE(late.ok());
    auto refused = second->restore();
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.error().code == core::Errc::invalid_argument);
    CHECK_THAT(refused.error().message, Catch::Contains("late#0"));
    CHECK(core::max_abs_diff((*strategy)->read(*m).value(), before) == 0.0f);

    REQUIRE(second->finish().ok());
    CHECK_FALSE(std::filesystem::exists(dir.path()));
  }

  SECTION("A lost worker rejoins when it answers again, with its datasets rebuilt") {
    auto ds = c.create_per_worker_dataset("ints").value();
    // Runs who_batch until worker 1 has run one (within a bound); returns the label sum of
    // the batch worker 1 got.
    int64_t scheduled = 0;
    auto next_on_worker_1 = [&]() -> double {
      const auto until = std::chrono::steady_clock::now() + 10s;
      while (std::chrono::steady_clock::now() < until) {
        std::vector<RemoteValue<double>> got;
        for (int i = 0; i < 2; ++i)
          got.push_back(c.schedule<double>("who_batch", ds));
        scheduled += 2;
        REQUIRE(c.join().ok());
        for (auto& g : got)
          if (const double x = g.fetch().value(); x >= 999.0) return x - 1000.0;
      }
      FAIL("worker 1 ran no closure in 50 rounds");
      return 0;
    };
    // Worker 1's shard of 0..19 is the odd labels: its first batch sums to 1+3+5+7+9.
    CHECK(next_on_worker_1() == 25.0);

    // A hung worker (SIGSTOP) misses its heartbeats and is lost; resumed, it answers on
    // its address again and rejoins, with its iterator rebuilt from the top.
    auto& w1 = children[3];
    w1->kill(SIGSTOP);
    const bool lost = c.wait_for_stats([](const auto& s) { return s.workers_lost == 1; }, 10s);
    w1->kill(SIGCONT);
    REQUIRE(lost);
    REQUIRE(c.wait_for_stats([](const auto& s) { return s.worker_rejoins == 1; }, 10s));
    CHECK(next_on_worker_1() == 25.0);

    // A killed worker restarted on its address (as troupe launch --restart-failed does)
    // rejoins the same way.
    w1->kill(SIGKILL);
    REQUIRE(w1->wait_exit(10s).has_value());
    REQUIRE(c.wait_for_stats([](const auto& s) { return s.workers_lost == 2; }, 10s));
    f.cluster.restart(3);
    REQUIRE(w1->wait_for_stderr("ready", 10s));
    REQUIRE(c.wait_for_stats([](const auto& s) { return s.worker_rejoins == 2; }, 10s));
    CHECK(next_on_worker_1() == 25.0);
    CHECK(c.stats().completed == scheduled);
  }

  SECTION("A failed worker actor is restarted by its node supervisor and rejoins") {
    // An exit message with reason `kill` ends the worker actor as a crash would; the
    // process stays up, its supervisor publishes a fresh worker on the same port, and the
    // coordinator takes it back like a restarted process.
    auto& s = (*strategy)->impl();
    const std::string address = spec.address({"worker", 1});
    auto crash_worker_1 = [&](int64_t lost) {
      auto w1 = net::connect_with_retry(*s.sys, address, "worker:1", 10s);
      REQUIRE(w1.ok());
      caf::anon_send_exit(*w1, caf::exit_reason::kill);
      REQUIRE(c.wait_for_stats([&](const auto& st) { return st.workers_lost >= lost; }, 10s));
    };
    crash_worker_1(1);
    REQUIRE(c.wait_for_stats([](const auto& st) { return st.worker_rejoins >= 1; }, 10s));
    CHECK(children[3]->running());
    CHECK(children[3]->wait_for_stderr("restarts 'worker:1'", 5s));
    // The new worker actor runs closures.
    bool ran_on_1 = false;
    const auto until = std::chrono::steady_clock::now() + 10s;
    while (!ran_on_1 && std::chrono::steady_clock::now() < until) {
      auto a = c.schedule<int>("whoami");
      auto b = c.schedule<int>("whoami");
      ran_on_1 = a.fetch().value() == 1 || b.fetch().value() == 1;
    }
    CHECK(ran_on_1);
    REQUIRE(c.join().ok());

    // Past the supervisor's intensity (3 restarts in 5 s) the process gives up and exits
    // with the error; the coordinator carries on with worker 0.
    for (int64_t k = 2; k <= 4; ++k) {
      REQUIRE(c.wait_for_stats([&](const auto& st) { return st.worker_rejoins >= k - 1; }, 10s));
      crash_worker_1(k);
    }
    CHECK(children[3]->wait_for_stderr("gives up", 10s));
    auto status = children[3]->wait_exit(10s);
    REQUIRE(status.has_value());
    CHECK((WIFEXITED(*status) && WEXITSTATUS(*status) != 0));
    CHECK(c.schedule<int>("add", 2, 3).fetch().value() == 5);
  }

  SECTION("A dead PS fails the closures that need it instead of hanging") {
    // Mid-training: the workers have reached ps:0 (closures go to idle workers first, so
    // each runs one). A worker that never has gives a PS request_timeout, 30 s, to answer
    // its first request, as at a crowded start-up.
    for (int i = 0; i < 4; ++i)
      c.schedule<double>("ones_step", std::string("v"));
    REQUIRE(c.join().ok());
    children[0]->kill(SIGKILL);  // ps:0 holds shard 0 of v
    REQUIRE(children[0]->wait_exit(10s).has_value());
    auto r = c.schedule<double>("ones_step", std::string("v"));
    auto st = c.join();
    REQUIRE_FALSE(st.ok());
    CHECK(st.error().code == core::Errc::unavailable);
    CHECK_THAT(st.error().message, Catch::Contains("ps:0"));
    CHECK(r.fetch().error().code == core::Errc::unavailable);
    CHECK(c.schedule<int>("add", 2, 2).fetch().value() == 4);  // workers still serve
  }

  f.shut_down_and_check();
}

TEST_CASE("A first closure is timed from the start-up's progress and later ones from their start",
          "[process][cluster]") {
  // How closures travel does not matter here: tensors through the tensor channel only.
  test::PsCluster f(true);
  auto& strategy = f.strategy;
  // Each worker's first closure on a connection also reaches the PS tasks for the first
  // time, as every task of a starting job does: it is timed from the last first closure
  // any worker answered. Worker B's first closure runs 5.5 s, 3 s past worker A's:
  // within the 4 s timeout so counted, though past 1.25 timeouts from its own start (the
  // check runs every quarter timeout). Then a 7 s closure on a worker that has answered
  // one is overdue, and with max_closure_losses 1 fails. (Margins of 1 s or more: the
  // two workers may become ready at different times.)
  CoordinatorOptions o;
  o.closure_timeout = 4000ms;
  o.max_closure_losses = 1;
  auto timed = ClusterCoordinator::make(**strategy, o).value();
  auto a = timed->schedule<int>("busy_ms", 2500);
  auto b = timed->schedule<int>("busy_ms", 5500);
  REQUIRE(timed->join().ok());
  CHECK(a.fetch().ok());
  CHECK(b.fetch().ok());
  CHECK(timed->stats().workers_lost == 0);
  auto late = timed->schedule<int>("busy_ms", 7000);
  const auto st = timed->join();
  REQUIRE_FALSE(st.ok());
  CHECK(st.error().code == core::Errc::internal);
  CHECK_THAT(st.error().message, Catch::Contains("'busy_ms'"));
  CHECK(late.fetch().error().code == core::Errc::internal);
  CHECK(timed->stats().workers_lost == 1);
  // The lost worker rejoins once its step ends; both serve again.
  REQUIRE(timed->wait_for_stats([](const auto& s) { return s.worker_rejoins == 1; }, 15s));
  CHECK(workers_serving(*timed) == std::set<int>{0, 1});
  f.shut_down_and_check();
}
