// Clusters of one PS task and one worker on 127.0.0.1, the test as chief: what the PS
// reports to the chief, and several shards of one variable on one PS task.
#include <catch2/catch.hpp>

#include <atomic>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "api/impl.hpp"
#include "cluster_fixture.hpp"
#include "helpers.hpp"
#include "job/job_registry.hpp"

using namespace troupe;
using namespace std::chrono_literals;

TEST_CASE("A PS whose snapshots fail is reported in the coordinator's stats",
          "[process][cluster][restore]") {
  // The snapshot directory lies under a regular file: every write fails, as on a full or
  // read-only disk. The job trains on; the failures reach the chief.
  test::TempDir dir;
  std::ofstream(dir.file("not-a-directory")) << "x\n";
  test::LocalCluster cluster(
      1, 1, {"--ps-snapshot-dir", dir.file("not-a-directory"), "--ps-snapshot-interval-ms", "20"});
  auto resolver = cluster.chief();
  auto strategy = ParameterServerStrategy::make(resolver);
  REQUIRE(strategy.ok());
  auto v = (*strategy)->create_variable("v", core::Shape{2},
                                        {core::Initializer::Kind::constant, 1.0f, 0}, "sgd", 0.5f);
  REQUIRE(v.ok());
  CoordinatorOptions o;
  o.ps_recovery = true;
  auto c = ClusterCoordinator::make(**strategy, o).value();
  REQUIRE(c->schedule<double>("ones_step", std::string("v")).fetch().ok());
  REQUIRE(c->wait_for_stats([](const auto& s) { return s.snapshot_failures > 0; }, 10s));
  CHECK(c->stats().snapshot_age_ms == -1);  // no snapshot was ever written
  CHECK(cluster.child(0)->wait_for_stderr("PS snapshot failed", 5s));
  c->shutdown_cluster();
}

TEST_CASE("Several shards of one variable live on one PS task", "[process][cluster]") {
  // Three shards over one PS task: each is its own variable shard there, not a clash of
  // names, and pulls, pushes and row updates reach the right one.
  test::LocalCluster cluster(1, 1);
  auto resolver = cluster.chief();
  auto strategy =
      ParameterServerStrategy::make(resolver, std::make_shared<core::FixedShardsPartitioner>(3));
  REQUIRE(strategy.ok());
  auto v = (*strategy)->create_variable("v", core::Shape{6, 2},
                                        {core::Initializer::Kind::constant, 1.0f, 0}, "sgd", 0.5f);
  REQUIRE(v.ok());
  CHECK(v->num_shards == 3);
  auto c = ClusterCoordinator::make(**strategy).value();
  CHECK(c->schedule<double>("ones_step", std::string("v")).fetch().value() == Approx(12.0));
  auto rows = c->schedule<double>("rows_step", std::string("v"), std::vector<int64_t>{5, 0});
  CHECK(rows.fetch().value() == Approx(2.0));  // rows 5 and 0 after the first push: 4 x 0.5
  REQUIRE(c->join().ok());
  const core::Tensor now = (*strategy)->read(*v).value();
  REQUIRE(now.shape() == (core::Shape{6, 2}));
  for (int64_t r = 0; r < 6; ++r)
    for (int64_t k = 0; k < 2; ++k)
      CHECK(now[r * 2 + k] == Approx(r == 0 || r == 5 ? 0.0f : 0.5f));
  c->shutdown_cluster();
}

TEST_CASE("Rows of two variables pulled and pushed in one call reach each variable's own rows",
          "[process][cluster]") {
  // Two PS tasks, both variables in two shards: one pull_rows call for both (its requests
  // carry items of both variables) returns each its own rows, and one push_rows call for
  // both lands in each variable's own rows.
  test::LocalCluster cluster(2, 1);
  auto resolver = cluster.chief();
  auto strategy =
      ParameterServerStrategy::make(resolver, std::make_shared<core::FixedShardsPartitioner>(2));
  REQUIRE(strategy.ok());
  auto a = (*strategy)->create_variable("a", core::Shape{6, 2},
                                        {core::Initializer::Kind::constant, 1.0f, 0}, "sgd", 0.5f);
  auto b = (*strategy)->create_variable("b", core::Shape{5, 3},
                                        {core::Initializer::Kind::constant, 2.0f, 0}, "sgd", 0.5f);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK(a->num_shards == 2);
  CHECK(b->num_shards == 2);
  auto c = ClusterCoordinator::make(**strategy).value();
  auto sums = c->schedule<std::vector<double>>("two_rows_step", std::string("a"),
                                               std::vector<int64_t>{5, 0, 3}, std::string("b"),
                                               std::vector<int64_t>{4, 1})
                  .fetch();
  REQUIRE(sums.ok());
  REQUIRE(sums->size() == 2);
  CHECK((*sums)[0] == Approx(6.0));   // 3 rows of a, 2 wide, all 1
  CHECK((*sums)[1] == Approx(12.0));  // 2 rows of b, 3 wide, all 2
  REQUIRE(c->join().ok());
  const core::Tensor now_a = (*strategy)->read(*a).value();
  const core::Tensor now_b = (*strategy)->read(*b).value();
  for (int64_t r = 0; r < 6; ++r)
    for (int64_t k = 0; k < 2; ++k)
      CHECK(now_a[r * 2 + k] == Approx(r == 0 || r == 3 || r == 5 ? 0.5f : 1.0f));
  for (int64_t r = 0; r < 5; ++r)
    for (int64_t k = 0; k < 3; ++k)
      CHECK(now_b[r * 3 + k] == Approx(r == 1 || r == 4 ? 1.0f : 2.0f));
  c->shutdown_cluster();
}

TEST_CASE("Interleaved rows: row r on shard r % shards is read, pulled, pushed and found",
          "[process][cluster]") {
  // A table of 7 rows interleaved over 2 PS tasks (rows 0, 2, 4, 6 and 1, 3, 5), row r
  // set to {r, 10 + r}: the chief reads it whole and by rows, a worker pulls and pushes
  // rows and the whole variable, each PS task counts only its own rows, and a second
  // strategy finds it as it is.
  test::LocalCluster cluster(2, 1);
  auto resolver = cluster.chief();
  StrategyOptions so;
  so.row_layout = core::RowLayout::interleaved;
  auto strategy =
      ParameterServerStrategy::make(resolver, std::make_shared<core::FixedShardsPartitioner>(2), so)
          .value();
  auto a = strategy->create_variable("a", core::Shape{7, 2},
                                     {core::Initializer::Kind::constant, 0.0f, 0}, "sgd", 0.5f);
  REQUIRE(a.ok());
  core::Tensor value{core::Shape{7, 2}};
  for (int64_t r = 0; r < 7; ++r) {
    value[2 * r] = static_cast<float>(r);
    value[2 * r + 1] = static_cast<float>(10 + r);
  }
  REQUIRE(strategy->assign(*a, value).ok());
  auto same = [](const core::Tensor& x, const core::Tensor& y) {
    return x.shape() == y.shape() &&
           std::equal(x.data(), x.data() + x.size(), y.data(), y.data() + y.size());
  };
  CHECK(same(strategy->read(*a).value(), value));
  const core::Tensor three = strategy->read_rows(*a, {5, 0, 3}).value();
  CHECK(std::vector<float>(three.data(), three.data() + 6) ==
        std::vector<float>{5, 15, 0, 10, 3, 13});

  auto c = ClusterCoordinator::make(*strategy).value();
  // rows_step: the sum of the rows pulled, then a gradient of ones on them.
  auto rows = c->schedule<double>("rows_step", std::string("a"), std::vector<int64_t>{5, 0, 3});
  CHECK(rows.fetch().value() == Approx(5 + 15 + 0 + 10 + 3 + 13));
  REQUIRE(c->join().ok());
  const auto load = strategy->ps_stats().value();
  REQUIRE(load.size() == 2);
  // Rows 5 and 3 are shard 1's, row 0 shard 0's, wherever each shard was placed.
  CHECK(std::multiset<int64_t>{load[0].rows_pulled, load[1].rows_pulled} ==
        std::multiset<int64_t>{1, 2});
  CHECK(load[0].rows_pushed + load[1].rows_pushed == 3);
  CHECK(load[0].bytes_pulled + load[1].bytes_pulled == 3 * 2 * 4);
  // ones_step: the whole variable pulled, a gradient of ones pushed to every row.
  CHECK(c->schedule<double>("ones_step", std::string("a")).fetch().value() ==
        Approx(7 * 3 + 7 * 13 - 3 * 0.5 * 2));
  REQUIRE(c->join().ok());
  core::Tensor expected = value;
  for (int64_t r = 0; r < 7; ++r)
    for (int64_t k = 0; k < 2; ++k)
      expected[2 * r + k] -= (r == 0 || r == 3 || r == 5 ? 1.0f : 0.5f);
  CHECK(same(strategy->read(*a).value(), expected));

  auto reader = ParameterServerStrategy::make(resolver).value();
  auto found = reader->find_variables();
  REQUIRE(found.ok());
  REQUIRE(found->size() == 1);
  CHECK((*found)[0].shape == (core::Shape{7, 2}));
  CHECK(same(reader->read((*found)[0]).value(), expected));
  c->shutdown_cluster();
}

TEST_CASE(
    "A dataset slower than the worker's dataset bound fails naming it, and the worker serves on",
    "[process][cluster]") {
  // The worker waits 200 ms for a dataset whose function does not return until the test
  // releases it: the call fails at the bound, naming the dataset, instead of holding the
  // worker's thread for as long as the function takes; once released, the next dataset
  // and closures run on the same worker.
  test::TempDir hold;
  test::Env hold_dir("TROUPE_TEST_HOLD_DIR", hold.path());  // the workers inherit it
  test::LocalCluster cluster(1, 1, {}, {"--dataset-timeout-ms", "200"});
  auto resolver = cluster.chief();
  auto strategy = ParameterServerStrategy::make(resolver);
  REQUIRE(strategy.ok());
  auto c = ClusterCoordinator::make(**strategy).value();
  auto slow = c->create_per_worker_dataset("held_ints");
  std::ofstream(hold.file("release")).close();
  REQUIRE_FALSE(slow.ok());
  CHECK(slow.error().code == core::Errc::unavailable);
  CHECK_THAT(slow.error().message,
             Catch::Contains("held_ints") && Catch::Contains("no answer within 200 ms"));
  auto ds = c->create_per_worker_dataset("ints");
  REQUIRE(ds.ok());
  auto sum = c->schedule<double>("batch_sum", *ds);
  CHECK(sum.fetch().value() == Approx(0.0 + 1 + 2 + 3 + 4));
  CHECK(c->stats().workers_lost == 0);
  c->shutdown_cluster();
}

TEST_CASE("A dataset whose creation failed or timed out is not built when a worker rejoins",
          "[process][cluster]") {
  // A worker that rejoins builds the job's datasets again, from the top. One whose creation
  // failed (no such function; past the worker's 200 ms bound) is not the job's: built
  // again it would fail again, and the worker would never rejoin.
  test::TempDir hold;  // never released: held_ints always times out
  test::Env hold_dir("TROUPE_TEST_HOLD_DIR", hold.path());
  test::LocalCluster cluster(1, 1, {}, {"--dataset-timeout-ms", "200"});
  auto resolver = cluster.chief();
  auto strategy = ParameterServerStrategy::make(resolver);
  REQUIRE(strategy.ok());
  auto c = ClusterCoordinator::make(**strategy).value();
  auto ds = c->create_per_worker_dataset("ints");
  REQUIRE(ds.ok());
  CHECK(c->schedule<double>("batch_sum", *ds).fetch().value() == Approx(0.0 + 1 + 2 + 3 + 4));
  CHECK(c->create_per_worker_dataset("no_such_dataset").error().code == core::Errc::not_found);
  CHECK(c->create_per_worker_dataset("held_ints").error().code == core::Errc::unavailable);

  auto& worker = cluster.children()[1];
  worker->kill(SIGKILL);
  REQUIRE(worker->wait_exit(10s).has_value());
  REQUIRE(c->wait_for_stats([](const auto& s) { return s.workers_lost == 1; }, 10s));
  cluster.restart(1);
  REQUIRE(worker->wait_for_stderr("ready", 10s));
  REQUIRE(c->wait_for_stats([](const auto& s) { return s.worker_rejoins == 1; }, 10s));
  CHECK(c->schedule<double>("batch_sum", *ds).fetch().value() == Approx(0.0 + 1 + 2 + 3 + 4));
  CHECK(c->shutdown_cluster().ok());
}

TEST_CASE("A dynamic table's rows are pulled and pushed by key across its shards",
          "[process][cluster]") {
  // Three shards on one PS task, keys anywhere in 64 bits: the worker routes each key to
  // its shard, a key gets its row at its second occurrence, the chief reads rows by key.
  test::LocalCluster cluster(1, 1);
  auto resolver = cluster.chief();
  auto strategy = ParameterServerStrategy::make(resolver).value();
  DynamicTableSpec spec;
  spec.width = 2;
  spec.shards = 3;
  spec.min_count = 2;
  spec.sketch_width = 1 << 10;
  auto t = strategy->create_dynamic_table("ids", spec, {core::Initializer::Kind::constant, 1.0f, 0},
                                          "sgd", 0.5f);
  REQUIRE(t.ok());
  CHECK(t->num_shards == 3);
  std::vector<int64_t> keys;
  for (int64_t i = 0; i < 12; ++i)
    keys.push_back(i * 0x0123456789abcdefll);
  auto c = ClusterCoordinator::make(*strategy).value();
  // Pulls before a key has a row read zeros; the first push is dropped, the second admits
  // (row 1.0, then one SGD step: 0.5), the third pull reads 0.5 per element.
  CHECK(c->schedule<double>("rows_step", std::string("ids"), keys).fetch().value() == 0.0);
  CHECK(c->schedule<double>("rows_step", std::string("ids"), keys).fetch().value() == 0.0);
  CHECK(c->schedule<double>("rows_step", std::string("ids"), keys).fetch().value() ==
        Approx(12 * 2 * 0.5));
  REQUIRE(c->join().ok());
  const core::Tensor rows = strategy->read_rows(*t, {keys[3], 42, keys[0]}).value();
  REQUIRE(rows.shape() == (core::Shape{3, 2}));
  CHECK(rows[0] == Approx(0.0f));  // three SGD steps from 1.0 after admission: 1 - 2 x 0.5
  CHECK(rows[2] == 0.0f);          // 42 was never seen
  CHECK_THAT(strategy->read(*t).error().message, Catch::Contains("dynamic table"));
  const auto stats = strategy->ps_stats().value();
  REQUIRE(stats.size() == 1);
  CHECK(stats[0].table_rows == 12);
  CHECK(stats[0].rows_admitted == 12);
  CHECK(stats[0].grads_dropped_unadmitted == 12);
  CHECK(stats[0].table_bytes > 0);
  c->shutdown_cluster();
}

TEST_CASE("The chief reads a dynamic table whole in pages from its shards", "[process][cluster]") {
  // 40 keys over 3 shards read 4 rows a page: every admitted key once with its row; a
  // min_count above what was seen keeps them out; a fixed variable is refused by name.
  test::LocalCluster cluster(1, 1);
  auto resolver = cluster.chief();
  auto strategy = ParameterServerStrategy::make(resolver).value();
  DynamicTableSpec spec;
  spec.width = 3;
  spec.shards = 3;
  auto t = strategy->create_dynamic_table("ids", spec, {core::Initializer::Kind::constant, 1.0f, 0},
                                          "sgd", 0.5f);
  REQUIRE(t.ok());
  auto fixed = strategy->create_variable("v", core::Shape{4, 3},
                                         {core::Initializer::Kind::constant, 1.0f, 0}, "sgd", 0.5f);
  REQUIRE(fixed.ok());
  std::vector<int64_t> keys;
  for (int64_t i = 0; i < 40; ++i)
    keys.push_back(i * 0x0123456789abcdefll + 5);
  auto c = ClusterCoordinator::make(*strategy).value();
  REQUIRE(c->schedule<double>("rows_step", std::string("ids"), keys).fetch().ok());
  REQUIRE(c->join().ok());
  auto all = strategy->read_table(*t, 0, 4);
  REQUIRE(all.ok());
  REQUIRE(all->values.shape() == (core::Shape{40, 3}));
  CHECK(std::set<int64_t>(all->keys.begin(), all->keys.end()) ==
        std::set<int64_t>(keys.begin(), keys.end()));
  for (int64_t i = 0; i < all->values.size(); ++i)
    CHECK(all->values[i] == Approx(0.5f));     // admitted at 1.0, one SGD step of 1 x 0.5
  auto none = strategy->read_table(*t, 2, 4);  // each key was seen once
  REQUIRE(none.ok());
  CHECK(none->keys.empty());
  CHECK_THAT(strategy->read_table(*fixed).error().message, Catch::Contains("not a dynamic table"));
  CHECK_THAT(strategy->read_table(*t, 0, 0).error().message,  // refused by the PS task
             Catch::Contains("fewer than one row"));
  c->shutdown_cluster();
}

TEST_CASE("A second process finds the variables on the PS tasks and reads them",
          "[process][cluster]") {
  // What troupe export --job does: a strategy that created nothing asks each PS task for
  // its shards' definitions and reads every variable as its creator does. A PS task that
  // comes back empty leaves a shard on no task: refused, naming it.
  test::LocalCluster cluster(2, 1);
  auto resolver = cluster.chief();
  auto creator =
      ParameterServerStrategy::make(resolver, std::make_shared<core::FixedShardsPartitioner>(2))
          .value();
  auto dense = creator->create_variable(
      "w", core::Shape{5, 2}, {core::Initializer::Kind::random_uniform, 0.5f, 7}, "sgd", 0.5f);
  REQUIRE(dense.ok());
  REQUIRE(dense->num_shards == 2);
  DynamicTableSpec spec;
  spec.width = 2;
  spec.shards = 3;
  spec.max_rows = 30;
  auto table = creator->create_dynamic_table(
      "ids", spec, {core::Initializer::Kind::constant, 1.0f, 0}, "sgd", 0.5f);
  REQUIRE(table.ok());
  std::vector<int64_t> keys;
  for (int64_t i = 0; i < 12; ++i)
    keys.push_back(i * 0x0123456789abcdefll + 3);
  auto c = ClusterCoordinator::make(*creator).value();
  REQUIRE(c->schedule<double>("rows_step", std::string("ids"), keys).fetch().ok());
  REQUIRE(c->join().ok());

  auto reader = ParameterServerStrategy::make(resolver).value();
  auto own = reader->create_variable("mine", core::Shape{1},
                                     {core::Initializer::Kind::constant, 0.0f, 0}, "sgd", 0.1f);
  REQUIRE(own.ok());
  auto found = reader->find_variables();
  REQUIRE(found.ok());
  REQUIRE(found->size() == 2);  // "ids" and "w", by name; not its own "mine"
  const Variable& t = (*found)[0];
  const Variable& w = (*found)[1];
  CHECK(t.name == "ids");
  CHECK(t.num_shards == 3);
  CHECK(t.shape == (core::Shape{30, 2}));
  CHECK(w.name == "w");
  CHECK(w.num_shards == 2);
  CHECK(w.shape == (core::Shape{5, 2}));
  const core::Tensor expected = creator->read(*dense).value();
  const core::Tensor read = reader->read(w).value();
  REQUIRE(read.shape() == expected.shape());
  for (int64_t i = 0; i < read.size(); ++i)
    CHECK(read[i] == expected[i]);
  const auto rows = reader->read_table(t).value();
  CHECK(std::set<int64_t>(rows.keys.begin(), rows.keys.end()) ==
        std::set<int64_t>(keys.begin(), keys.end()));
  CHECK(reader->read_rows(t, {keys[4]}).value()[0] == Approx(0.5f));
  CHECK(reader->find_variables().value().empty());  // found once: they are its own now

  // ps:1 restarted without snapshots holds nothing: "w" shard 1 is on no task.
  auto& ps1 = cluster.child(1);
  ps1->kill(SIGKILL);
  REQUIRE(ps1->wait_exit(10s).has_value());
  cluster.restart(1);
  REQUIRE(cluster.child(1)->wait_for_stderr("ready", 10s));
  auto late = ParameterServerStrategy::make(resolver).value();
  auto missing = late->find_variables();
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().code == core::Errc::unavailable);
  CHECK_THAT(missing.error().message, Catch::Contains("is on no PS task"));
  c->shutdown_cluster();
}

TEST_CASE("A PS that stalled while nothing watched it is still told to shut down at the end",
          "[process][cluster]") {
  // Without PS recovery no proxy watches the PS task: a stall (SIGSTOP) past the heartbeat
  // timeout drops its connection, then it goes on (SIGCONT). The end of the job reaches it
  // afresh: it acknowledges and exits, instead of serving on until its launcher kills it.
  test::LocalCluster cluster(1, 1);
  auto resolver = cluster.chief();
  auto strategy = ParameterServerStrategy::make(resolver).value();
  REQUIRE(strategy
              ->create_variable("v", core::Shape{2}, {core::Initializer::Kind::constant, 1.0f, 0},
                                "sgd", 0.5f)
              .ok());
  auto c = ClusterCoordinator::make(*strategy).value();
  REQUIRE(c->schedule<double>("ones_step", std::string("v")).fetch().ok());
  auto& ps = cluster.child(0);
  caf::scoped_actor self{*strategy->impl().sys};
  self->monitor(strategy->impl().ps[0]);
  ps->kill(SIGSTOP);
  bool dropped = false;
  self->receive([&](caf::down_msg&) { dropped = true; }, caf::after(10s) >> [] {});
  ps->kill(SIGCONT);
  REQUIRE(dropped);  // missed heartbeats: the chief's connection to it is gone
  // What this test is for: the PS is reached and told, and ends by itself. Its
  // acknowledgement can be lost on the way back under load (seen in 3 of 20 runs on two
  // loaded cores: a process just resumed may answer over the route CAF had for the
  // connection that was dropped), so a missing one is reported, not failed.
  const auto told = c->shutdown_cluster();
  if (!told.ok()) WARN("shutdown_cluster: " << told.error().message);
  const auto status = ps->wait_exit(10s);
  REQUIRE(status.has_value());
  CHECK((WIFEXITED(*status) && WEXITSTATUS(*status) == 0));
}

namespace {

// Two PS tasks and two workers; `v` ({4, 2}, zeros, sgd at learning rate 1) in two shards,
// each with a copy on both PS tasks.
std::unique_ptr<ParameterServerStrategy> two_copies(const net::ClusterResolver& resolver) {
  StrategyOptions so;
  so.ps_replicas = 2;
  auto made = ParameterServerStrategy::make(resolver,
                                            std::make_shared<core::FixedShardsPartitioner>(2), so);
  REQUIRE(made.ok());
  return std::move(*made);
}

struct Replicated {
  test::LocalCluster cluster{2, 2};
  std::unique_ptr<ParameterServerStrategy> strategy = two_copies(cluster.chief());
  core::Expected<Variable> v = strategy->create_variable(
      "v", core::Shape{4, 2}, {core::Initializer::Kind::constant, 0.0f, 0}, "sgd", 1.0f);
  Replicated() { REQUIRE(v.ok()); }
};

}  // namespace

TEST_CASE("Replicated shards: a killed PS task fails over, each update applied once, none lost",
          "[process][cluster][replicas]") {
  // Two PS tasks, two copies of each of v's two shards. ps:1 is killed while closures are
  // in flight, without snapshots and without a restart: its shards' copies on ps:0 serve
  // at once. Every closure pushes a gradient of ones (sgd, learning rate 1) exactly once:
  // closures that failed against ps:1 run again, and their pushes that had landed on ps:0
  // are ignored there. So v ends at -n, not below (applied twice) nor above (lost).
  Replicated r;
  auto& cluster = r.cluster;
  auto& strategy = r.strategy;
  auto& v = r.v;
  // Each shard's primary and backup are the two tasks, one each way.
  const auto& placed = strategy->impl().placements;
  REQUIRE(placed.size() == 2);
  for (const auto& p : placed) {
    REQUIRE(p.backups.size() == 1);
    CHECK(p.backups[0] != p.ps_task);
  }
  CHECK(placed[0].ps_task != placed[1].ps_task);
  auto c = ClusterCoordinator::make(*strategy).value();
  constexpr int n = 400;
  std::vector<RemoteValue<double>> results;
  for (int i = 0; i < n; ++i)
    results.push_back(c->schedule<double>("ones_step", std::string("v")));
  REQUIRE(c->wait_for_stats([](const auto& s) { return s.completed >= 40; }, 60s));
  auto& ps1 = cluster.child(1);
  ps1->kill(SIGKILL);
  REQUIRE(ps1->wait_exit(10s).has_value());
  const auto joined = c->join();
  INFO((joined.ok() ? std::string("joined") : joined.error().to_string()));
  REQUIRE(joined.ok());
  for (auto& r : results)
    CHECK(r.fetch().ok());
  const auto stats = c->stats();
  CHECK(stats.completed == n);
  CHECK(stats.ps_failovers == 1);
  CHECK(stats.under_replicated_shards == 2);  // ps:1 held a copy of each shard
  // A worker whose request failed against ps:1 made it again once it heard of the
  // failover, within the closure: the closure (and those queued behind it, up to 8 a
  // worker) did not fail and go back to the chief.
  int64_t rerouted = 0;
  auto& impl = strategy->impl();
  for (int w = 0; w < 2; ++w) {
    auto worker =
        net::connect_with_retry(*impl.sys, cluster.spec().address({"worker", w}), "worker", 5s);
    REQUIRE(worker.ok());
    (*impl.self)
        ->request(*worker, 5s, net::stats_atom::value)
        .receive([&](const std::vector<int64_t>& s) { rerouted += s.at(3); },
                 [&](caf::error& e) { FAIL(impl.sys->render(e)); });
  }
  INFO("closures retried " << stats.retried << ", requests made again " << rerouted);
  CHECK(stats.retried == 0);
  CHECK(stats.updates_lost == 0);
  CHECK(stats.ps_restores == 0);
  // The chief reads through the routing too: every copy it can reach says -n.
  const core::Tensor now = strategy->read(*v).value();
  REQUIRE(now.shape() == (core::Shape{4, 2}));
  for (int64_t i = 0; i < now.size(); ++i)
    CHECK(now[i] == Approx(-static_cast<float>(n)));
  auto ps_stats = strategy->ps_stats();
  REQUIRE(ps_stats.ok());
  CHECK((*ps_stats)[1].lost);
  CHECK((*ps_stats)[0].updates_applied == 2 * n);  // both shards' copies, each push once
  const auto shutdown = c->shutdown_cluster();
  REQUIRE_FALSE(shutdown.ok());  // ps:1 is gone: named, not waited for
  CHECK_THAT(shutdown.error().message, Catch::Contains("ps:1"));
}

TEST_CASE("Replicated shards: a restarted PS task rejoins with copies while training goes on",
          "[process][cluster][replicas]") {
  // ps:1 is killed and restarted empty while closures run; it rejoins as a replica (each
  // shard copied from ps:0 and caught up with what it was sent meanwhile) until every
  // shard has two copies again. Then ps:0 is killed: ps:1's copies serve alone. Every
  // push of ones (sgd, learning rate 1) is applied once on what survives: v ends at -n,
  // and each key of the dynamic table "ids" (rows made at their first push, from 1) at
  // 1 - m, for n and m the closures of each kind.
  Replicated r;
  auto& cluster = r.cluster;
  auto& strategy = r.strategy;
  auto& v = r.v;
  DynamicTableSpec spec;
  spec.width = 2;
  spec.shards = 2;
  auto table = strategy->create_dynamic_table(
      "ids", spec, {core::Initializer::Kind::constant, 1.0f, 0}, "sgd", 1.0f);
  REQUIRE(table.ok());
  const std::vector<int64_t> keys{7, 0x0123456789abcdefll, -3, 1ll << 40, 12345, 99};
  CoordinatorOptions co;
  co.max_pending_closures = 64;  // closures keep coming while the copies are made
  auto c = ClusterCoordinator::make(*strategy, co).value();
  std::atomic<bool> stop{false};
  std::atomic<int> scheduled{0}, row_steps{0};
  std::thread feeder([&] {
    while (!stop && scheduled < 100000) {
      if (!c->schedule_no_result("ones_step", 1, std::string("v")).ok()) break;
      ++scheduled;
      if (!c->schedule_no_result("rows_step", 1, std::string("ids"), keys).ok()) break;
      ++row_steps;
    }
  });
  struct Join {
    std::atomic<bool>& stop;
    std::thread& t;
    ~Join() {
      stop = true;
      if (t.joinable()) t.join();
    }
  } join_feeder{stop, feeder};
  REQUIRE(c->wait_for_stats([](const auto& s) { return s.completed >= 40; }, 60s));
  cluster.child(1)->kill(SIGKILL);
  REQUIRE(cluster.child(1)->wait_exit(10s).has_value());
  REQUIRE(c->wait_for_stats([](const auto& s) { return s.ps_failovers == 1; }, 30s));
  cluster.restart(1);
  REQUIRE(cluster.child(1)->wait_for_stderr("ready", 10s));
  const bool rebuilt = c->wait_for_stats(
      [](const auto& s) { return s.replicas_rebuilt == 4 && s.under_replicated_shards == 0; }, 60s);
  INFO("stats: rebuilt " << c->stats().replicas_rebuilt << ", under-replicated "
                         << c->stats().under_replicated_shards);
  REQUIRE(rebuilt);
  const int64_t before_second = c->stats().completed;
  if (c->stats().failed > 0) {  // say why, rather than wait for progress that cannot come
    stop = true;
    feeder.join();
    FAIL("a closure failed: " << c->join().error().to_string()
                              << "\nworker:0: " << cluster.child(2)->captured_stderr()
                              << "\nworker:1: " << cluster.child(3)->captured_stderr());
  }
  REQUIRE(c->wait_for_stats([&](const auto& s) { return s.completed >= before_second + 40; },
                            60s));  // both copies
  cluster.child(0)->kill(SIGKILL);
  REQUIRE(cluster.child(0)->wait_exit(10s).has_value());
  REQUIRE(c->wait_for_stats([](const auto& s) { return s.ps_failovers == 2; }, 30s));
  const int64_t after_second = c->stats().completed;
  REQUIRE(c->wait_for_stats([&](const auto& s) { return s.completed >= after_second + 40; }, 60s));
  stop = true;
  feeder.join();
  const auto joined = c->join();
  INFO((joined.ok() ? std::string("joined") : joined.error().to_string()));
  REQUIRE(joined.ok());
  const auto stats = c->stats();
  const int n = scheduled.load(), m = row_steps.load();
  CHECK(stats.completed == n + m);
  CHECK(stats.updates_lost == 0);
  CHECK(stats.ps_restores == 0);
  CHECK(stats.replicas_rebuilt == 4);  // v's two shards and the table's
  const core::Tensor now = strategy->read(*v).value();
  for (int64_t i = 0; i < now.size(); ++i)
    CHECK(now[i] == Approx(-static_cast<float>(n)));
  const auto rows = strategy->read_table(*table).value();
  CHECK(std::set<int64_t>(rows.keys.begin(), rows.keys.end()) ==
        std::set<int64_t>(keys.begin(), keys.end()));
  for (int64_t i = 0; i < rows.values.size(); ++i)
    CHECK(rows.values[i] == Approx(1.0f - static_cast<float>(m)));
  c->shutdown_cluster();
}
