// A real cluster on 127.0.0.1: two PS processes and two worker processes, the test as
// chief. Variables live on the PS tasks, closures run on every worker, RemoteValues carry
// the right values, join/done behave, and an application error is raised once.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>

#include "api/impl.hpp"
#include "cluster_fixture.hpp"
#include "helpers.hpp"
#include "job/job_registry.hpp"

using namespace troupe;
using namespace std::chrono_literals;

namespace {

// The workers that run closures, asked in pairs until both answer (at most 50 rounds). A
// worker runs its mailbox in order, so once it answers it has answered all sent before.
// The workers that answer `whoami` within 10 s. A worker still finishing a cancelled
// closure counts as busy, and the coordinator sends every closure to the other meanwhile:
// a number of rounds would be a time bound that a loaded machine breaks.
std::set<int> workers_serving(ClusterCoordinator& c) {
  std::set<int> serving;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (serving.size() < 2 && std::chrono::steady_clock::now() < deadline) {
    auto a = c.schedule<int>("whoami");
    auto b = c.schedule<int>("whoami");
    serving.insert(a.fetch().value());
    serving.insert(b.fetch().value());
  }
  return serving;
}

}  // namespace

TEST_CASE("Parameter-server training across processes", "[process][cluster]") {
  // Every section runs with tensors through the tensor channel and as CAF messages.
  const bool channel = GENERATE(true, false);
  CAPTURE(channel);
  // Children: ps:0, ps:1, worker:0, worker:1.
  test::LocalCluster cluster(
      2, 2, channel ? std::vector<std::string>{} : std::vector<std::string>{"--no-tensor-channel"},
      channel ? std::vector<std::string>{} : std::vector<std::string>{"--caf-tensors"});
  const net::ClusterSpec& spec = cluster.spec();
  auto& children = cluster.children();

  const auto registry = test::make_test_registry();
  net::SimpleClusterResolver resolver(spec, {"chief", 0});
  auto strategy =
      ParameterServerStrategy::make(resolver, std::make_shared<core::FixedShardsPartitioner>(2));
  REQUIRE(strategy.ok());
  auto v = (*strategy)->create_variable("v", core::Shape{4, 2},
                                        {core::Initializer::Kind::constant, 1.0f, 0}, "sgd", 0.5f);
  REQUIRE(v.ok());
  CHECK(v->num_shards == 2);
  auto dup = (*strategy)->create_variable("v", core::Shape{4, 2}, {}, "sgd", 0.5f);
  CHECK_FALSE(dup.ok());

  // The watchdog's reports, kept for the section that checks them.
  std::mutex reports_mu;
  std::vector<WatchdogReport> reports;
  CoordinatorOptions options;
  options.watchdog_timeout = 400ms;
  options.on_watchdog = [&](const WatchdogReport& r) {
    std::lock_guard<std::mutex> lock(reports_mu);
    reports.push_back(r);
  };
  auto coord = ClusterCoordinator::make(**strategy, options);
  REQUIRE(coord.ok());
  ClusterCoordinator& c = **coord;

  SECTION("RemoteValues carry results, closures run on every worker") {
    std::vector<RemoteValue<int>> sums;
    for (int i = 0; i < 10; ++i)
      sums.push_back(c.schedule<int>("add", i, 100));
    REQUIRE(c.join().ok());
    CHECK(c.done());
    for (int i = 0; i < 10; ++i)
      CHECK(sums[static_cast<size_t>(i)].fetch().value() == 100 + i);
    // Which worker runs a closure depends on timing (a worker that answers first takes the
    // first closures), so schedule rounds until both have run some, within a bound.
    std::set<int> workers;
    int scheduled = 10;
    const auto until = std::chrono::steady_clock::now() + 10s;
    while (workers.size() < 2 && std::chrono::steady_clock::now() < until) {
      std::vector<RemoteValue<int>> who;
      for (int i = 0; i < 20; ++i)
        who.push_back(c.schedule<int>("whoami"));
      scheduled += 20;
      REQUIRE(c.join().ok());
      for (auto& w : who)
        workers.insert(w.fetch().value());
    }
    CHECK(workers == std::set<int>{0, 1});
    CHECK(c.stats().completed == scheduled);
    CHECK(c.stats().workers_lost == 0);
  }

  SECTION("Gradients reach the sharded variable on the PS tasks") {
    std::vector<RemoteValue<double>> seen;
    for (int i = 0; i < 4; ++i) {
      seen.push_back(c.schedule<double>("ones_step", std::string("v")));
      REQUIRE(c.join().ok());  // one at a time, so each pull sees the previous push
    }
    for (int i = 0; i < 4; ++i)
      CHECK(seen[static_cast<size_t>(i)].fetch().value() == Approx(8.0 * (1.0 - 0.5 * i)));
    auto now = (*strategy)->read(*v);
    REQUIRE(now.ok());
    CHECK(now->shape() == (core::Shape{4, 2}));
    for (int64_t k = 0; k < now->size(); ++k)
      CHECK((*now)[k] == Approx(-1.0f));
    // The tensors went the way this run asked for.
    auto& impl = (*strategy)->impl();
    int64_t by_channel = 0, by_caf = 0;
    for (int w = 0; w < 2; ++w) {
      auto worker = net::connect_with_retry(*impl.sys, spec.address({"worker", w}), "worker", 5s);
      REQUIRE(worker.ok());
      (*impl.self)
          ->request(*worker, 5s, net::stats_atom::value)
          .receive(
              [&](const std::vector<int64_t>& s) {
                REQUIRE(s.size() == 3);
                by_channel += s[1];
                by_caf += s[2];
              },
              [&](caf::error& e) { FAIL(impl.sys->render(e)); });
    }
    CHECK(by_channel + by_caf >= 4);
    CHECK((channel ? by_caf : by_channel) == 0);
  }

  SECTION("Row pulls and pushes reach the right shards") {
    // v is [4, 2] in two shards: rows 0-1 on one PS task, rows 2-3 on the other.
    auto pulled = c.schedule<double>("rows_step", std::string("v"), std::vector<int64_t>{3, 0, 3});
    REQUIRE(c.join().ok());
    CHECK(pulled.fetch().value() == Approx(6.0));
    auto now = (*strategy)->read(*v);
    REQUIRE(now.ok());
    // Row 3 was pushed twice in one closure: summed, so 1 - 0.5 * 2; row 0 once.
    const std::vector<float> expected{0.5f, 0.5f, 1, 1, 1, 1, 0, 0};
    for (int64_t k = 0; k < now->size(); ++k)
      CHECK((*now)[k] == Approx(expected[static_cast<size_t>(k)]));
    auto bad = c.schedule<double>("rows_step", std::string("v"), std::vector<int64_t>{4});
    CHECK(bad.fetch().error().code == core::Errc::out_of_range);
    CHECK_FALSE(c.join().ok());
  }

  SECTION("Per-worker datasets are sharded by worker") {
    CHECK(c.create_per_worker_dataset("no_such_dataset").error().code == core::Errc::not_found);
    auto ds = c.create_per_worker_dataset("ints").value();
    std::vector<RemoteValue<double>> sums;
    for (int i = 0; i < 8; ++i)
      sums.push_back(c.schedule<double>("batch_sum", ds));
    REQUIRE(c.join().ok());
    double total = 0;
    int ends = 0;
    for (auto& s : sums) {
      const double x = s.fetch().value();
      if (x < 0)
        ++ends;
      else
        total += x;
    }
    // Each worker's shard of 0..19 has two batches of 5; all 20 labels are seen once
    // unless one worker took more than its two batches (then it reports its end).
    CHECK(total + 0.0 <= 190.0);
    CHECK((ends > 0 || total == 190.0));
  }

  SECTION("An application error is raised once and cancels what is queued") {
    auto bad = c.schedule<int>("fail", 1);
    std::vector<RemoteValue<int>> after;
    for (int i = 0; i < 50; ++i)
      after.push_back(c.schedule<int>("add", i, i));
    auto st = c.join();
    REQUIRE_FALSE(st.ok());
    CHECK_THAT(st.error().message, Catch::Contains("injected failure"));
    CHECK(bad.fetch().error().code == core::Errc::invalid_argument);
    // Each later closure was cancelled, or (scheduled once the error was back) refused with
    // that error, as TensorFlow's schedule() raises it.
    int cancelled = 0, refused = 0;
    for (auto& a : after) {
      auto r = a.fetch();
      if (r.ok()) continue;
      if (r.error().code == core::Errc::cancelled) {
        ++cancelled;
      } else {
        CHECK_THAT(r.error().message, Catch::Contains("injected failure"));
        ++refused;
      }
    }
    CHECK(cancelled == c.stats().cancelled);
    CHECK(cancelled + refused > 0);
    CHECK(c.join().ok());  // raised once; the coordinator is usable again
    CHECK(c.schedule<int>("add", 1, 2).fetch().value() == 3);

    // While an error is pending, schedule() returns it and schedules nothing.
    auto again = c.schedule<int>("fail", 1);
    REQUIRE(c.wait_for_stats([](const auto& s) { return s.failed == 2; }, 10s));
    const int64_t scheduled = c.stats().scheduled;
    auto refused_now = c.schedule<int>("add", 1, 1);
    REQUIRE(refused_now.ready());
    CHECK_THAT(refused_now.fetch().error().message, Catch::Contains("injected failure"));
    CHECK_FALSE(c.schedule_no_result("add", 1, 1, 1).ok());
    CHECK(c.stats().scheduled == scheduled);
    CHECK_FALSE(c.join().ok());
    CHECK(c.schedule<int>("add", 2, 2).fetch().value() == 4);

    // A step that takes value() of an error fails with that error; its worker serves on.
    auto careless = c.schedule<int>("value_of_error");
    auto raised = c.join();
    REQUIRE_FALSE(raised.ok());
    CHECK(raised.error().code == core::Errc::not_found);
    CHECK_THAT(raised.error().message, Catch::Contains("no such thing"));
    CHECK(careless.fetch().error().code == core::Errc::not_found);
    CHECK(workers_serving(c) == std::set<int>{0, 1});
    CHECK(c.stats().workers_lost == 0);
  }

  SECTION("Closures spread over idle workers before any waits in a mailbox") {
    // Scheduled at once after the coordinator was made: a worker still being brought up
    // must get the second closure, not have it queued behind the first on the other.
    test::TempDir dir;
    auto a = c.schedule<int>("marked_hold", dir.path(), std::string("a"));
    auto b = c.schedule<int>("marked_hold", dir.path(), std::string("b"));
    const bool both_running = test::wait_for_file_in(
        dir.path(),
        [&] {
          return std::filesystem::exists(dir.file("a")) && std::filesystem::exists(dir.file("b"));
        },
        10s);
    std::ofstream(dir.file("release")) << "go\n";
    CHECK(both_running);
    CHECK(std::set<int>{a.fetch().value(), b.fetch().value()} == std::set<int>{0, 1});
    REQUIRE(c.join().ok());
  }

  SECTION("The first error cancels running and queued closures, and join returns at once") {
    test::TempDir dir;
    // Worker A runs a 30 s pull loop; the other worker B waits to fail; a third closure
    // is sent ahead into a busy worker's mailbox.
    auto long_run = c.schedule<int>("pull_loop", std::string("v"), dir.path(), std::string("l"));
    REQUIRE(test::wait_for_file_in(
        dir.path(), [&] { return std::filesystem::exists(dir.file("l")); }, 10s));
    auto failing = c.schedule<int>("fail_when_released", dir.path());
    auto queued = c.schedule<bool>("touch", dir.path(), std::string("ran"));
    const auto t0 = std::chrono::steady_clock::now();
    std::ofstream(dir.file("release")) << "go\n";
    auto st = c.join();
    const auto took = std::chrono::steady_clock::now() - t0;
    REQUIRE_FALSE(st.ok());
    CHECK_THAT(st.error().message, Catch::Contains("released failure"));
    CHECK(took < 10s);  // not after the long closure's 30 s
    CHECK(failing.fetch().error().code == core::Errc::invalid_argument);
    CHECK(long_run.fetch().error().code == core::Errc::cancelled);
    CHECK(queued.fetch().error().code == core::Errc::cancelled);
    CHECK(c.stats().cancelled == 2);
    // Both workers serve again (each answers its mailbox in order, so by then the queued
    // closure has been dropped unrun).
    CHECK(workers_serving(c) == std::set<int>{0, 1});
    CHECK_FALSE(std::filesystem::exists(dir.file("ran")));
    CHECK(c.stats().workers_lost == 0);
  }

  SECTION("Coordinators never repeat closure ids, and a RemoteValue outlives its coordinator") {
    // A second coordinator with default options (a chief restarted without a backup):
    // its pushes are applied, not taken for the first one's.
    auto pushed = c.schedule<double>("ones_step", std::string("v"));
    REQUIRE(c.join().ok());
    CHECK(pushed.fetch().value() == Approx(8.0));
    auto second = ClusterCoordinator::make(**strategy).value();
    auto again = second->schedule<double>("ones_step", std::string("v"));
    REQUIRE(second->join().ok());
    CHECK(again.fetch().value() == Approx(4.0));  // saw the first push (1 - 0.5 each)
    const core::Tensor now = (*strategy)->read(*v).value();
    for (int64_t i = 0; i < now.size(); ++i)
      CHECK(now[i] == Approx(0.0f));  // and its own was applied

    test::TempDir dir;
    auto held = second->schedule<bool>("held", dir.path(), std::string("release"));
    second.reset();
    auto r = held.fetch();  // returns at once instead of waiting forever
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == core::Errc::cancelled);
    std::ofstream(dir.file("release")) << "go\n";
  }

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
    auto nan = c.schedule<double>("checked_step", std::string("v"), std::nanf(""));
    for (int i = 0; i < 100; ++i)
      after.push_back(c.schedule<double>("checked_step", std::string("v"), 1.0f));
    auto st = c.join();
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
    CHECK(cancelled == c.stats().cancelled);
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
    auto held = c.schedule<bool>("held", dir.path(), std::string("release"));
    REQUIRE(c.wait_for_stats([&](const auto& s) { return s.watchdog_reports > before; }, 5s));
    WatchdogReport r;
    {
      std::lock_guard<std::mutex> lock(reports_mu);
      REQUIRE(!reports.empty());
      r = reports.back();
    }
    CHECK(r.since_progress >= 400ms);
    CHECK(r.queued == 0);
    REQUIRE(r.workers.size() == 2);
    int holding = 0;
    for (const auto& w : r.workers)
      for (const auto& f : w.in_flight) {
        ++holding;
        CHECK(f.step == "held");
        // Sent just after the time without progress began counting.
        CHECK(f.age > r.since_progress - 50ms);
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
    cluster.restart(3);
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
    children[0]->kill(SIGKILL);  // ps:0 holds shard 0 of v
    REQUIRE(children[0]->wait_exit(10s).has_value());
    auto r = c.schedule<double>("ones_step", std::string("v"));
    auto st = c.join();
    REQUIRE_FALSE(st.ok());
    CHECK(st.error().code == core::Errc::unavailable);
    CHECK(r.fetch().error().code == core::Errc::unavailable);
    CHECK(c.schedule<int>("add", 2, 2).fetch().value() == 4);  // workers still serve
  }

  // Every task still running acknowledges and exits 0; shutdown_cluster() names those that
  // did not.
  std::vector<std::string> gone;
  std::vector<size_t> serving;
  for (size_t k = 0; k < children.size(); ++k) {
    if (children[k]->running())
      serving.push_back(k);
    else
      gone.push_back(k < 2 ? "ps:" + std::to_string(k) : "worker:" + std::to_string(k - 2));
  }
  const auto shutdown = c.shutdown_cluster();
  REQUIRE(shutdown.ok() == gone.empty());
  for (const auto& name : gone)
    CHECK_THAT(shutdown.error().message, Catch::Contains(name));
  for (size_t k : serving) {
    auto status = children[k]->wait_exit(10s);
    INFO("child " << k << " (0, 1: PS; 2, 3: workers): " << children[k]->captured_stderr());
    REQUIRE(status.has_value());
    CHECK((WIFEXITED(*status) && WEXITSTATUS(*status) == 0));
  }
}
