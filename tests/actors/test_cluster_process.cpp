// A real cluster on 127.0.0.1: two PS processes and two worker processes, the test as
// chief. Variables live on the PS tasks, closures run on every worker, RemoteValues carry
// the right values, join/done behave, and an application error is raised once.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "helpers.hpp"
#include "ps_cluster.hpp"

using namespace troupe;
using namespace std::chrono_literals;
using test::workers_serving;

TEST_CASE("Parameter-server training across processes", "[process][cluster]") {
  // Every section runs with tensors through the tensor channel and as CAF messages.
  const bool channel = GENERATE(true, false);
  CAPTURE(channel);
  test::PsCluster f(channel);
  const net::ClusterSpec& spec = f.cluster.spec();
  auto& children = f.cluster.children();
  auto& strategy = f.strategy;
  auto& v = *f.v;
  auto& reports = f.reports;
  auto& reports_mu = f.reports_mu;
  ClusterCoordinator& c = *f.coord;
  (void)spec, (void)children, (void)v, (void)reports, (void)reports_mu;
  // Outlives the shutdown check at the end: a closure still on its way to a worker when its
  // coordinator goes must find its release file there, not wait out its own bound.
  test::TempDir held_dir;

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
    // Tasks that computed on the CPU mapped none of CUDA's libraries, in a build that has
    // them too (the CUDA backend is a module loaded when a GPU is asked for).
    for (auto& child : children)
      CHECK(test::mapped_files_with(child->pid(), test::cuda_library_names).empty());
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
                REQUIRE(s.size() == 4);
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

    auto held = second->schedule<bool>("held", held_dir.path(), std::string("release"));
    second.reset();
    auto r = held.fetch();  // returns at once instead of waiting forever
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == core::Errc::cancelled);
    std::ofstream(held_dir.file("release")) << "go\n";
  }

  f.shut_down_and_check();
}
