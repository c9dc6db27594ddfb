// Delta PS snapshots: the rows of dynamic tables changed since the snapshot before, applied
// in order on top of a full snapshot; and the actor's chain of full snapshots and deltas.
#include <catch2/catch.hpp>

#include <caf/all.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>

#include "actors/ps_shard.hpp"
#include "helpers.hpp"
#include "ps_shard_helpers.hpp"

using namespace troupe;
using actors::PsShardState;
using test::def;
using test::tensor;

namespace {

// What the ps_shard actor writes as a delta: every shard (dynamic ones as their changed
// rows and evicted keys), the count, the chain position; each shard's next delta starts here.
core::Checkpoint take_delta(PsShardState& ps, int64_t base, int64_t index) {
  core::Checkpoint c;
  for (const auto& name : ps.shard_names()) {
    ps.snapshot_shard_delta(name, c);
    ps.mark_copied(name);
  }
  ps.snapshot_counters(c);
  c.ints["delta"] = {base, index};
  return c;
}

// Every key's row (zeros for a key without one) and the dense variable, as the PS serves them.
std::vector<float> served(PsShardState& ps, const std::vector<int64_t>& keys) {
  auto out = ps.pull_rows("ids#0", keys).value().data;
  const auto dense = ps.pull("w#0").value().data;
  out.insert(out.end(), dense.begin(), dense.end());
  return out;
}

}  // namespace

TEST_CASE(
    "Delta snapshots hold the changed rows and full plus deltas restore the state at the last",
    "[ps_shard][delta]") {
  PsShardState ps;
  ps.track_deltas(true);
  auto d = def("ids", {40, 2}, "adagrad");  // a cap of 40 rows: admissions evict
  d.dynamic = true;
  d.ttl_steps = 30;
  REQUIRE(ps.create(d).ok());
  REQUIRE(ps.create(def("w", {2}, "adagrad")).ok());
  std::vector<int64_t> all;
  uint64_t closure = 1;
  auto push = [&](int64_t first, int64_t n) {
    std::vector<int64_t> keys;
    for (int64_t k = first; k < first + n; ++k)
      keys.push_back(k * 7919);
    all.insert(all.end(), keys.begin(), keys.end());
    std::vector<float> g(static_cast<size_t>(2 * n));
    for (size_t i = 0; i < g.size(); ++i)
      g[i] = 0.01f * static_cast<float>((static_cast<int64_t>(i) + first) % 13) - 0.05f;
    REQUIRE(ps.push_rows(closure++, "ids#0", {keys, tensor({n, 2}, g)}).value());
    REQUIRE(ps.push(closure++, "w#0", tensor({2}, {0.1f, -0.2f})).value());
  };
  for (int64_t i = 0; i < 30; ++i)
    push(i, 1 + i % 3);  // 30 rows of 40
  core::Checkpoint full = ps.snapshot();
  for (const auto& name : ps.shard_names())
    ps.mark_copied(name);

  for (int64_t i = 0; i < 4; ++i)
    push(5 + i, 2);  // updates of rows in the full snapshot
  const core::Checkpoint delta1 = take_delta(ps, 7, 1);
  CHECK(delta1.tensors.at("ids#0").shape()[0] == 5);  // keys 5..9 changed
  for (int64_t i = 0; i < 25; ++i)
    push(100 + 2 * i, 2);  // new keys: past the cap, rows are evicted
  for (int64_t i = 0; i < 3; ++i)
    push(5, 1);
  const core::Checkpoint delta2 = take_delta(ps, 7, 2);
  CHECK_FALSE(delta2.ints.at("ids#0/evicted").empty());
  CHECK(ps.table_totals().evicted > 0);
  CHECK(delta2.tensors.at("ids#0").shape()[0] < ps.table_totals().rows + 1);

  auto restored = PsShardState::from_snapshot(full);
  REQUIRE(restored.ok());
  REQUIRE(restored->apply_delta(delta1).ok());
  REQUIRE(restored->apply_delta(delta2).ok());
  CHECK(served(*restored, all) == served(ps, all));
  CHECK(restored->table_totals().rows == ps.table_totals().rows);
  CHECK(restored->counters().updates_applied == ps.counters().updates_applied);
  // Applied tags and the tables' clocks came back: the next update lands alike.
  CHECK_FALSE(
      restored->push_rows(closure - 2, "ids#0", {{5 * 7919}, tensor({1, 2}, {1, 1})}).value());
  const net::RowsUpdate next{{5 * 7919, 100 * 7919, 999}, tensor({3, 2}, {1, 2, 3, 4, 5, 6})};
  CHECK(ps.push_rows(closure, "ids#0", next).value());
  CHECK(restored->push_rows(closure, "ids#0", next).value());
  CHECK(served(*restored, all) == served(ps, all));

  // Without the last delta: the state at the first one, not a mix.
  auto older = PsShardState::from_snapshot(full);
  REQUIRE(older->apply_delta(delta1).ok());
  CHECK(older->counters().updates_applied < ps.counters().updates_applied);

  // A delta is not a full snapshot and the reverse; a damaged delta is data_loss naming
  // the shard.
  CHECK(PsShardState::from_snapshot(delta1).error().code == core::Errc::data_loss);
  CHECK_FALSE(PsShardState::from_snapshot(full)->apply_delta(full).ok());
  for (auto damage : std::vector<std::function<void(core::Checkpoint&)>>{
           [](core::Checkpoint& c) { c.ints.erase("ids#0/evicted"); },
           [](core::Checkpoint& c) { c.ints["ids#0/keys"].pop_back(); },
           [](core::Checkpoint& c) { c.ints["ids#0/row_meta"][1] = -3; },
           [](core::Checkpoint& c) { c.tensors["ids#0"].data()[0] = std::nanf(""); }}) {
    core::Checkpoint c = delta2;
    damage(c);
    auto base = PsShardState::from_snapshot(full);
    REQUIRE(base->apply_delta(delta1).ok());
    auto st = base->apply_delta(c);
    REQUIRE_FALSE(st.ok());
    CHECK(st.error().code == core::Errc::data_loss);
    CHECK_THAT(st.error().message, Catch::Contains("ids#0"));
  }
}

TEST_CASE("After a failed delta write the next PS snapshot is full", "[ps_shard][delta]") {
  caf::actor_system_config cfg;
  troupe::net::add_wire_types(cfg);
  caf::actor_system sys{cfg};
  troupe::test::TempDir root;
  const std::string dir = root.file("snap");
  actors::PsShardOptions o;
  o.snapshot_dir = dir;
  o.snapshot_interval = std::chrono::hours(1);  // only the snapshots this test asks for
  o.snapshot_full_every = 100;
  auto ps = sys.spawn(actors::ps_shard, o);
  caf::scoped_actor self{sys};
  const auto t = std::chrono::seconds(5);
  auto d = def("ids", {0, 2}, "adagrad");
  d.dynamic = true;
  self->request(ps, t, net::create_atom::value, d)
      .receive([](caf::ok_atom) {}, [&](caf::error& e) { FAIL(sys.render(e)); });
  uint64_t closure = 1;
  auto push = [&](int64_t key) {
    self->request(ps, t, net::push_rows_atom::value, closure++, std::string("ids#0"),
                  net::RowsUpdate{{key}, tensor({1, 2}, {1, 1})})
        .receive([](bool applied) { CHECK(applied); }, [&](caf::error& e) { FAIL(sys.render(e)); });
  };
  // A snapshot asked for, and the stats once its write has ended (bounded wait).
  auto snapshot = [&](int64_t written, int64_t failed) {
    self->send(ps, net::snapshot_atom::value);
    net::PsStats st;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    do
      self->request(ps, t, net::stats_atom::value)
          .receive([&](std::vector<int64_t>& v) { st = net::PsStats::from(v); },
                   [&](caf::error& e) { FAIL(sys.render(e)); });
    while ((st.snapshots < written || st.snapshot_failures < failed) &&
           std::chrono::steady_clock::now() < deadline);
    REQUIRE(st.snapshots == written);
    REQUIRE(st.snapshot_failures == failed);
    return st;
  };
  auto files = [&] {
    std::set<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(dir))
      names.insert(e.path().filename().string());
    return names;
  };
  push(1);
  snapshot(1, 0);  // full: ps-0
  push(2);
  snapshot(2, 0);  // a delta after it
  CHECK(files() == std::set<std::string>{"ps-0.tckpt", "delta-0-1.tckpt"});
  // The next write fails (the directory is a file for a moment, as a full disk would
  // fail it): that delta's rows are on no disk, so the one after must be full.
  push(3);
  std::filesystem::rename(dir, root.file("away"));
  std::ofstream(dir) << "x";
  snapshot(2, 1);
  std::filesystem::remove(dir);
  std::filesystem::rename(root.file("away"), dir);
  push(4);
  snapshot(3, 1);
  CHECK(files() == std::set<std::string>{"ps-0.tckpt", "delta-0-1.tckpt", "ps-2.tckpt"});
  auto restored = actors::restore_ps_snapshots(dir);
  REQUIRE(restored.ok());
  REQUIRE(restored->has_value());
  CHECK((*restored)->full == 2);
  CHECK((*restored)->deltas == 0);
  CHECK((*restored)->state->table_totals().rows == 4);  // key 3's row came with the full one
  self->send_exit(ps, caf::exit_reason::user_shutdown);
}
