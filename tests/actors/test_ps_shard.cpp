#include <catch2/catch.hpp>

#include <caf/all.hpp>

#include <cmath>
#include <filesystem>
#include <future>

#include "actors/ps_shard.hpp"
#include "core/checkpoint/checkpoint_manager.hpp"
#include "core/partitioner.hpp"
#include "helpers.hpp"
#include "ps_shard_helpers.hpp"

using namespace troupe;
using actors::PsShardState;
using net::VariableDef;
using net::WireTensor;

using test::def;
using test::tensor;

TEST_CASE("A PS shard creates, serves and updates variables", "[ps_shard]") {
  PsShardState ps;
  REQUIRE(ps.create(def("w", {2, 2})).ok());
  REQUIRE(ps.create(def("w", {2, 2})).ok());  // same definition again: no-op
  CHECK(ps.counters().variables == 1);
  auto conflict = ps.create(def("w", {3, 2}));
  REQUIRE_FALSE(conflict.ok());
  CHECK_THAT(conflict.error().message, Catch::Contains("another definition"));

  // Two shards of one variable on one PS task: kept apart by their keys.
  auto second = def("w", {1, 2});
  second.shard = 1;
  second.row_offset = 2;
  REQUIRE(ps.create(second).ok());
  CHECK(ps.has("w#0"));
  CHECK(ps.has("w#1"));
  CHECK(ps.pull("w#1")->dims == std::vector<int64_t>{1, 2});
  auto v = ps.pull("w#0");
  REQUIRE(v.ok());
  CHECK(v->dims == std::vector<int64_t>{2, 2});
  CHECK(v->data == std::vector<float>{1, 1, 1, 1});

  REQUIRE(ps.push(7, "w#0", tensor({2, 2}, {1, 2, 3, 4})).value() == true);
  CHECK(ps.pull("w#0")->data == std::vector<float>{0.5f, 0.0f, -0.5f, -1.0f});
}

TEST_CASE("A PS shard applies each closure id at most once", "[ps_shard]") {
  PsShardState ps;
  REQUIRE(ps.create(def("w", {3})).ok());
  REQUIRE(ps.create(def("emb", {4, 2}, "adagrad")).ok());
  CHECK(ps.push(1, "w#0", tensor({3}, {1, 1, 1})).value());
  CHECK_FALSE(ps.push(1, "w#0", tensor({3}, {1, 1, 1})).value());  // retried closure
  CHECK(ps.push(2, "w#0", tensor({3}, {1, 1, 1})).value());
  CHECK(ps.pull("w#0")->data == std::vector<float>{0, 0, 0});

  net::RowsUpdate u{{3, 0}, tensor({2, 2}, {1, 1, 1, 1})};
  CHECK(ps.push_rows(1, "emb#0", u).value());  // ids are per variable
  const auto after_first = ps.pull("emb#0")->data;
  CHECK_FALSE(ps.push_rows(1, "emb#0", u).value());
  CHECK(ps.pull("emb#0")->data == after_first);
  CHECK(ps.counters().updates_applied == 3);
  CHECK(ps.counters().updates_duplicate == 2);

  auto rows = ps.pull_rows("emb#0", {3, 1});
  REQUIRE(rows.ok());
  CHECK(rows->dims == std::vector<int64_t>{2, 2});
  CHECK(rows->data[0] < 1.0f);   // row 3 was updated
  CHECK(rows->data[2] == 1.0f);  // row 1 was not
}

TEST_CASE("A PS shard's snapshot restores values, slots, applied ids and counts", "[ps_shard]") {
  PsShardState ps;
  REQUIRE(ps.create(def("w", {3})).ok());
  auto adam = def("emb", {4, 2}, "adam");
  adam.shard = 1;
  adam.row_offset = 4;
  adam.seed = 99;
  REQUIRE(ps.create(adam).ok());
  CHECK(ps.push(1, "w#0", tensor({3}, {1, 2, 3})).value());
  CHECK(ps.push_rows(5, "emb#1", {{3, 0}, tensor({2, 2}, {1, 2, 3, 4})}).value());
  CHECK(ps.push_rows(6, "emb#1", {{1}, tensor({1, 2}, {-1, 1})}).value());

  const core::Checkpoint snap = ps.snapshot();
  auto restored = PsShardState::from_snapshot(snap);
  REQUIRE(restored.ok());
  CHECK(restored->restored_from() == 3);
  CHECK(restored->counters().updates_applied == 3);
  CHECK(restored->counters().variables == 2);
  CHECK(ps.restored_from() == -1);
  for (const char* name : {"w#0", "emb#1"})
    CHECK(restored->pull(name)->data == ps.pull(name)->data);
  // The closure ids applied before the snapshot stay applied: a retried closure is ignored.
  CHECK_FALSE(restored->push(1, "w#0", tensor({3}, {1, 1, 1})).value());
  CHECK_FALSE(restored->push_rows(6, "emb#1", {{1}, tensor({1, 2}, {-1, 1})}).value());
  // The Adam moments and iteration count came back: the next update matches the original.
  const net::RowsUpdate next{{3}, tensor({1, 2}, {0.5f, -0.5f})};
  CHECK(ps.push_rows(7, "emb#1", next).value());
  CHECK(restored->push_rows(7, "emb#1", next).value());
  CHECK(restored->pull("emb#1")->data == ps.pull("emb#1")->data);
  // The definition came back too: creating it again is a no-op, not a conflict.
  CHECK(restored->create(adam).ok());

  // An incomplete snapshot is a data_loss error naming the variable.
  core::Checkpoint broken = snap;
  broken.tensors.erase("emb#1/slot1");
  auto bad = PsShardState::from_snapshot(broken);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().code == core::Errc::data_loss);
  CHECK_THAT(bad.error().message, Catch::Contains("'emb#1'"));
  broken = snap;
  broken.ints.erase("updates_applied");
  CHECK(PsShardState::from_snapshot(broken).error().code == core::Errc::data_loss);
  broken = snap;
  broken.tensors["w#0"] = core::Tensor(core::Shape{4});
  CHECK(PsShardState::from_snapshot(broken).error().code == core::Errc::data_loss);

  // What no training writes, in a snapshot whose checksums would hold: a NaN or infinite
  // value or slot, a negative count. Refused naming it, not served.
  auto refused = [&](auto&& damage, const std::string& names) {
    core::Checkpoint c = snap;
    damage(c);
    auto r = PsShardState::from_snapshot(c);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == core::Errc::data_loss);
    CHECK_THAT(r.error().message, Catch::Contains(names));
  };
  refused([](core::Checkpoint& c) { c.tensors["w#0"].data()[2] = std::nanf(""); },
          "'w#0': a value that is not finite at element 2");
  refused([](core::Checkpoint& c) { c.tensors["emb#1/slot0"].data()[5] = INFINITY; },
          "'emb#1': slot 0 holds a value that is not finite at element 5");
  refused([](core::Checkpoint& c) { c.ints["emb#1/iterations"] = {-3}; },
          "'emb#1': a negative iteration count (-3)");
  refused([](core::Checkpoint& c) { c.ints["updates_applied"] = {-1}; },
          "negative update count (-1)");
  // Records against their definitions: a variable whose definition is gone is not left
  // out (the task would serve without it), a field out of range is not narrowed into one.
  refused([](core::Checkpoint& c) { c.ints.erase("w#0/def"); },
          "record 'w#0' belongs to no variable defined in it");
  refused(
      [](core::Checkpoint& c) {
        c.tensors["emb#1/slot2"] = core::Tensor(core::Shape{4, 2});
      },
      "record 'emb#1/slot2' belongs to no variable");
  refused([](core::Checkpoint& c) { c.ints["x/iterations"] = {1}; }, "record 'x/iterations'");
  refused([](core::Checkpoint& c) { c.ints["emb#1/def"][0] = int64_t{1} << 40; },
          "'emb#1': shard index 1099511627776 out of range");
  refused([](core::Checkpoint& c) { c.ints["emb#1/def"][1] = int64_t{1} << 62; },
          "'emb#1': variable 'emb': shard 1 at row 4611686018427387904 is out of range");
}

TEST_CASE("A PS shard's state can be read and assigned back, a bad one changes nothing",
          "[ps_shard]") {
  PsShardState ps;
  REQUIRE(ps.create(def("m", {2, 2}, "adam")).ok());
  CHECK(ps.push(1, "m#0", tensor({2, 2}, {1, 2, 3, 4})).value());
  const net::ShardState saved = ps.state("m#0").value();
  CHECK(saved.slots.size() == 2);
  CHECK(saved.iterations == 1);
  CHECK(ps.push(2, "m#0", tensor({2, 2}, {4, 3, 2, 1})).value());
  const auto after_second = ps.pull("m#0").value();

  // Assigned back, the shard takes the same second update again (under a new tag).
  REQUIRE(ps.assign("m#0", saved).ok());
  CHECK(ps.pull("m#0")->data == saved.value.data);
  CHECK(ps.state("m#0")->iterations == 1);
  CHECK(ps.push(3, "m#0", tensor({2, 2}, {4, 3, 2, 1})).value());
  CHECK(ps.pull("m#0")->data == after_second.data);
  CHECK_FALSE(ps.push(2, "m#0", tensor({2, 2}, {4, 3, 2, 1})).value());  // tags are kept

  const auto before = ps.state("m#0").value();
  auto wrong_shape = saved;
  wrong_shape.value = tensor({4}, {0, 0, 0, 0});
  auto too_few = saved;
  too_few.slots.pop_back();
  auto bad_slot = saved;
  bad_slot.slots[1] = tensor({2, 2}, {0, 0, 0});  // inconsistent
  for (const auto* bad : {&wrong_shape, &too_few, &bad_slot}) {
    auto st = ps.assign("m#0", *bad);
    REQUIRE_FALSE(st.ok());
    CHECK(st.error().code == core::Errc::invalid_argument);
    CHECK_THAT(st.error().message, Catch::Contains("'m#0'"));
  }
  CHECK(ps.assign("nope", saved).error().code == core::Errc::not_found);
  const auto unchanged = ps.state("m#0").value();
  CHECK(unchanged.value.data == before.value.data);
  CHECK(unchanged.slots[0].data == before.slots[0].data);
  CHECK(unchanged.iterations == before.iterations);
}

TEST_CASE("A PS shard rejects bad requests and keeps its state", "[ps_shard]") {
  PsShardState ps;
  REQUIRE(ps.create(def("w", {2, 2})).ok());
  CHECK(ps.pull("nope").error().code == core::Errc::not_found);
  CHECK(ps.push(1, "w#0", tensor({4}, {1, 1, 1, 1})).error().code == core::Errc::invalid_argument);
  CHECK(ps.push(1, "w#0", tensor({2, 2}, {1, 1, 1})).error().code == core::Errc::invalid_argument);
  CHECK(ps.push_rows(1, "w#0", {{5}, tensor({1, 2}, {1, 1})}).error().code ==
        core::Errc::out_of_range);
  CHECK(ps.pull_rows("w#0", {-1}).error().code == core::Errc::out_of_range);
  CHECK_FALSE(ps.create(def("x", {1 << 30, 1 << 30})).ok());
  CHECK_FALSE(ps.create(def("y", {2}, "lion")).ok());
  CHECK(ps.pull("w#0")->data == std::vector<float>{1, 1, 1, 1});
  // A rejected push did not consume its closure id.
  CHECK(ps.push(1, "w#0", tensor({2, 2}, {0, 0, 0, 0})).value());
  CHECK(ps.counters().requests_rejected == 7);
}

TEST_CASE("The ps_shard actor answers requests and errors as values", "[ps_shard]") {
  caf::actor_system_config cfg;
  troupe::net::add_wire_types(cfg);
  caf::actor_system sys{cfg};
  auto ps = sys.spawn(actors::ps_shard, actors::PsShardOptions{});
  caf::scoped_actor self{sys};
  const auto t = std::chrono::seconds(5);
  bool created = false;
  self->request(ps, t, net::create_atom::value, def("w", {2}))
      .receive([&](caf::ok_atom) { created = true; }, [&](caf::error& e) { FAIL(sys.render(e)); });
  REQUIRE(created);
  bool applied = false;
  self->request(ps, t, net::push_atom::value, uint64_t{9}, std::string("w#0"), tensor({2}, {2, 2}))
      .receive([&](bool a) { applied = a; }, [&](caf::error& e) { FAIL(sys.render(e)); });
  CHECK(applied);
  std::vector<float> got;
  self->request(ps, t, net::pull_atom::value, std::string("w#0"))
      .receive([&](WireTensor& w) { got = w.data; }, [&](caf::error& e) { FAIL(sys.render(e)); });
  CHECK(got == std::vector<float>{0, 0});
  core::Error err;
  self->request(ps, t, net::pull_atom::value, std::string("missing"))
      .receive([&](WireTensor&) { FAIL("pull of a missing variable succeeded"); },
               [&](caf::error& e) { err = net::from_caf(e); });
  CHECK(err.code == core::Errc::not_found);
  CHECK_THAT(err.message, Catch::Contains("missing"));
  std::vector<int64_t> stats;
  self->request(ps, t, net::stats_atom::value)
      .receive([&](std::vector<int64_t>& s) { stats = s; }, [&](caf::error&) {});
  const auto st = net::PsStats::from(stats);
  CHECK(std::vector<int64_t>(stats.begin(), stats.begin() + 5) ==
        std::vector<int64_t>{1, 1, 1, 0, 1});
  CHECK(st.restored_from == -1);  // not restored
  CHECK(st.snapshots == 0);
  CHECK(st.snapshot_failures == 0);
  CHECK(st.snapshot_age_ms == -1);
  CHECK(st.process != 0);
  CHECK(st.rss_bytes > 0);
  CHECK(st.applied_tags == 1);
  CHECK(net::PsStats::from(st.to_vector()).to_vector() == stats);
  self->send_exit(ps, caf::exit_reason::user_shutdown);
}

TEST_CASE("At-most-once stays bounded: 100k closures hold only the tags in flight", "[ps_shard]") {
  PsShardState ps;
  REQUIRE(ps.create(def("w", {1})).ok());
  const auto g = tensor({1}, {1.0f});
  const uint64_t base = uint64_t{3} << 32;  // incarnation 3
  auto tag = [&](uint64_t n, uint64_t rep = 0) { return ((base + n) << 16) | rep; };
  // Closures 1..100000 in order, each with 8 more in flight behind the watermark, each
  // pushed twice (a retry): applied once each, and the shard holds at most the window.
  size_t most = 0;
  for (uint64_t n = 1; n <= 100000; ++n) {
    const uint64_t settled_below = base + (n > 8 ? n - 8 : 1);
    REQUIRE(ps.push(tag(n), "w#0", g, settled_below).value());
    CHECK_FALSE(ps.push(tag(n), "w#0", g, settled_below).value());
    most = std::max(most, ps.applied_tags());
  }
  CHECK(ps.counters().updates_applied == 100000);
  CHECK(ps.counters().updates_duplicate == 100000);
  CHECK(most <= 9);
  // A late push of a settled closure (its worker was taken for lost) is dropped...
  CHECK_FALSE(ps.push(tag(5), "w#0", g, base + 5).value());
  // ...and so is one below the watermark that was never applied (it was cancelled).
  CHECK_FALSE(ps.push(tag(99990, 1), "w#0", g).value());
  // A closure still in flight applies, once per repetition.
  CHECK(ps.push(tag(99999, 1), "w#0", g).value());
  // Another chief incarnation has its own window: its ids start over and still apply.
  CHECK(ps.push((((uint64_t{4} << 32) + 1) << 16), "w#0", g, (uint64_t{4} << 32) + 1).value());
  // A watermark above the closure's own id, or of another incarnation, is not believed.
  CHECK(ps.push(tag(100001), "w#0", g, base + 200000).value());
  CHECK(ps.push(tag(100002), "w#0", g, (uint64_t{4} << 32) + 9).value());
  CHECK(ps.counters().updates_applied == 100004);

  // The window survives a snapshot.
  auto restored = PsShardState::from_snapshot(ps.snapshot());
  REQUIRE(restored.ok());
  CHECK(restored->applied_tags() == ps.applied_tags());
  CHECK_FALSE(restored->push(tag(100002), "w#0", g).value());
  CHECK_FALSE(restored->push(tag(5), "w#0", g).value());
  CHECK(restored->push(tag(100003), "w#0", g).value());
}

TEST_CASE(
    "A PS snapshot is copied one shard per turn, each shard whole, and written off "
    "the actor",
    "[ps_shard]") {
  // One scheduler thread, held by a blocker while the test fills the PS's mailbox: the
  // snapshot and the pushes are all queued before the PS runs, so the order is exact.
  caf::actor_system_config cfg;
  troupe::net::add_wire_types(cfg);
  cfg.set("scheduler.max-threads", size_t{1});
  caf::actor_system sys{cfg};
  char tmpl[] = "/tmp/troupe-snapsteps-XXXXXX";
  const std::string dir = ::mkdtemp(tmpl);
  actors::PsShardOptions o;
  o.snapshot_dir = dir;
  o.snapshot_interval = std::chrono::hours(1);  // only the snapshot this test asks for
  auto ps = sys.spawn(actors::ps_shard, o);
  caf::scoped_actor self{sys};
  const auto t = std::chrono::seconds(5);
  for (std::string name : {"a", "b", "c", "d"})
    self->request(ps, t, net::create_atom::value, def(name, {1000, 8}))
        .receive([](caf::ok_atom) {}, [&](caf::error& e) { FAIL(sys.render(e)); });
  // Queued right behind the snapshot: the shards are copied last name first, one per turn,
  // so "d" is copied before these pushes are served and "a" and "c" after them.
  const WireTensor ones = tensor({1000, 8}, std::vector<float>(8000, 1.0f));
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::promise<void> holding;
  auto blocker = sys.spawn([released, &holding](caf::event_based_actor* b) -> caf::behavior {
    return {[=, &holding](int) {
      holding.set_value();
      released.wait();  // the only scheduler thread waits here
      b->quit();
    }};
  });
  self->send(blocker, 1);
  holding.get_future().wait();
  self->send(ps, net::snapshot_atom::value);
  self->send(ps, net::push_atom::value, uint64_t{5} << 16, std::string("c#0"), ones);
  self->send(ps, net::push_atom::value, uint64_t{6} << 16, std::string("a#0"), ones);
  self->send(ps, net::push_atom::value, uint64_t{7} << 16, std::string("d#0"), ones);
  release.set_value();
  for (int i = 0; i < 3; ++i)
    self->receive([](bool applied) { CHECK(applied); },
                  [&](caf::error& e) { FAIL(sys.render(e)); });
  // The write finishes on its own thread; stats report it once it has.
  net::PsStats st;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (st.snapshots < 1 && std::chrono::steady_clock::now() < deadline)
    self->request(ps, t, net::stats_atom::value)
        .receive([&](std::vector<int64_t>& v) { st = net::PsStats::from(v); },
                 [&](caf::error& e) { FAIL(sys.render(e)); });
  REQUIRE(st.snapshots == 1);
  CHECK(st.snapshot_copy_us > 0);
  CHECK(st.snapshot_age_ms >= 0);

  auto saved = core::CheckpointManager(dir, 2, "ps").restore_latest();
  REQUIRE(saved.ok());
  auto restored = PsShardState::from_snapshot(saved->second);
  REQUIRE(restored.ok());
  auto value = [&](const std::string& key) { return restored->pull(key).value().data[0]; };
  CHECK(value("a#0") == 0.5f);  // pushed before its copy: in it, tag and all
  CHECK(value("b#0") == 1.0f);
  CHECK(value("c#0") == 0.5f);
  CHECK(value("d#0") == 1.0f);  // copied before its push
  // Each shard's applied tags match its value: c's push is not applied twice, d's is due.
  CHECK_FALSE(restored->push(uint64_t{5} << 16, "c#0", ones).value());
  CHECK(restored->push(uint64_t{7} << 16, "d#0", ones).value());
  self->send_exit(ps, caf::exit_reason::user_shutdown);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

TEST_CASE("A PS shard of a dynamic table serves rows by key and snapshots them", "[ps_shard]") {
  PsShardState ps;
  auto d = def("ids", {0, 2}, "adagrad");
  d.dynamic = true;
  d.min_count = 2;
  d.sketch_width = 1 << 10;
  REQUIRE(ps.create(d).ok());
  REQUIRE(ps.create(d).ok());  // the same again: a no-op
  auto other = d;
  other.min_count = 3;
  REQUIRE_FALSE(ps.create(other).ok());

  const std::vector<int64_t> keys{int64_t{1} << 62, -5, 77};
  const auto grads = tensor({3, 2}, {1, 1, 1, 1, 1, 1});
  CHECK(ps.push_rows(1, "ids#0", {keys, grads}).value());  // first occurrence: dropped
  CHECK(ps.pull_rows("ids#0", keys)->data == std::vector<float>(6, 0.0f));
  CHECK(ps.push_rows(2, "ids#0", {{-5, 77}, tensor({2, 2}, {1, 1, 1, 1})}).value());
  CHECK(ps.table_totals().rows == 2);
  CHECK(ps.table_totals().grads_dropped == 3);
  CHECK(ps.table_totals().admitted == 2);
  auto rows = ps.pull_rows("ids#0", keys).value();
  CHECK(rows.dims == std::vector<int64_t>{3, 2});
  CHECK(rows.data[0] == 0.0f);                                       // never admitted
  CHECK(rows.data[2] == Approx(1.0f - 0.5f * 1 / std::sqrt(1.1f)));  // Adagrad from 1.0
  // A dynamic table has no dense value, and its rows are updated by key only.
  CHECK_THAT(ps.pull("ids#0").error().message, Catch::Contains("dynamic table"));
  CHECK_FALSE(ps.push(3, "ids#0", tensor({1, 2}, {1, 1})).ok());
  CHECK_FALSE(ps.state("ids#0").ok());

  const core::Checkpoint snap = ps.snapshot();
  auto restored = PsShardState::from_snapshot(snap);
  REQUIRE(restored.ok());
  CHECK(restored->pull_rows("ids#0", keys)->data == ps.pull_rows("ids#0", keys)->data);
  CHECK(restored->table_totals().rows == 2);
  // Applied tags came back; the next update matches the original's (slots and clock too).
  CHECK_FALSE(restored->push_rows(2, "ids#0", {{-5}, tensor({1, 2}, {1, 1})}).value());
  const net::RowsUpdate next{{77, -5}, tensor({2, 2}, {0.5f, -1, 2, 0})};
  CHECK(ps.push_rows(4, "ids#0", next).value());
  CHECK(restored->push_rows(4, "ids#0", next).value());
  CHECK(restored->pull_rows("ids#0", keys)->data == ps.pull_rows("ids#0", keys)->data);
  CHECK(restored->create(d).ok());

  // Damaged entries are data_loss errors naming the shard, never a table that differs.
  auto damaged = [&](auto&& damage) {
    core::Checkpoint c = snap;
    damage(c);
    auto r = PsShardState::from_snapshot(c);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == core::Errc::data_loss);
    CHECK_THAT(r.error().message, Catch::Contains("ids#0"));
  };
  damaged([](core::Checkpoint& c) { c.ints["ids#0/keys"].pop_back(); });
  damaged([](core::Checkpoint& c) { c.ints["ids#0/keys"][1] = c.ints["ids#0/keys"][0]; });
  damaged([](core::Checkpoint& c) { c.ints["ids#0/row_meta"][0] = -1; });
  damaged([](core::Checkpoint& c) { c.tensors["ids#0"].data()[1] = std::nanf(""); });
  damaged([](core::Checkpoint& c) { c.ints["ids#0/dynamic"].pop_back(); });
  damaged([](core::Checkpoint& c) { c.ints["ids#0/dynamic"][1] = 0; });  // probability 0
}

namespace {

// One push of `grad` to `key` under closure tag `tag`, as a batched request.
core::Status push_batch(PsShardState& ps, uint64_t tag, const std::string& key, WireTensor grad) {
  net::PsRequest r;
  r.op = static_cast<uint8_t>(net::PsOp::push);
  r.tag = tag;
  r.items.push_back({key, {}, std::move(grad)});
  auto out = ps.handle(r);
  if (!out) return out.error();
  return {};
}

}  // namespace

TEST_CASE("A rejoining shard keeps updates until its copy is in, then holds each once",
          "[ps_shard][replicas]") {
  // The serving copy applies tag 1 alone (routed before the rejoin), tag 2 with the
  // rejoining one, then is copied; tag 3 reaches the rejoining one before the copy is
  // installed and the serving one after the copy was taken. Installed, the rejoining
  // shard equals the serving one: tag 2 once (the copy had it), tag 3 once (kept).
  PsShardState serving, back;
  REQUIRE(serving.create(def("w", {3})).ok());
  REQUIRE(back.create(def("w", {3})).ok());
  REQUIRE(push_batch(back, 9, "w#0", tensor({3}, {4, 4, 4})).ok());  // stale: from before
  REQUIRE(back.rejoin({def("w", {3})}).ok());
  CHECK(back.rejoining() == 1);
  CHECK(back.definitions().empty());  // not here yet for a reader of the job
  auto pulled = back.pull("w#0");
  REQUIRE_FALSE(pulled.ok());
  CHECK(pulled.error().code == core::Errc::unavailable);
  CHECK_FALSE(back.copy_shard("w#0").ok());

  REQUIRE(push_batch(serving, 1, "w#0", tensor({3}, {1, 0, 0})).ok());
  REQUIRE(push_batch(serving, 2, "w#0", tensor({3}, {0, 1, 0})).ok());
  REQUIRE(push_batch(back, 2, "w#0", tensor({3}, {0, 1, 0})).ok());  // kept, acknowledged
  auto copy = serving.copy_shard("w#0");
  REQUIRE(copy.ok());
  REQUIRE(push_batch(back, 3, "w#0", tensor({3}, {0, 0, 1})).ok());
  REQUIRE(push_batch(serving, 3, "w#0", tensor({3}, {0, 0, 1})).ok());
  CHECK(back.counters().updates_applied == 1);  // only the stale push from before

  // Through the wire type and back, as the chief carries it.
  auto carried = actors::from_shard_copy(actors::to_shard_copy(*copy));
  REQUIRE(carried.ok());
  // A copy of another shape is refused and the shard stays rejoining.
  PsShardState other;
  REQUIRE(other.create(def("w", {4})).ok());
  auto wrong = back.install("w#0", other.copy_shard("w#0").value());
  REQUIRE_FALSE(wrong.ok());
  CHECK(back.rejoining() == 1);
  REQUIRE(back.install("w#0", *carried).ok());
  CHECK(back.rejoining() == 0);
  CHECK(back.pull("w#0")->data == serving.pull("w#0")->data);
  CHECK(back.pull("w#0")->data == std::vector<float>{0.5f, 0.5f, 0.5f});  // 1 - 0.5 each
  CHECK(back.counters().updates_duplicate == 1);                     // tag 2, in the copy already
  REQUIRE(push_batch(back, 1, "w#0", tensor({3}, {1, 1, 1})).ok());  // tag 1: in the copy
  CHECK(back.pull("w#0")->data == serving.pull("w#0")->data);
  CHECK(back.counters().updates_duplicate == 2);
  auto again = back.install("w#0", *carried);
  REQUIRE_FALSE(again.ok());
  CHECK(again.error().code == core::Errc::invalid_argument);  // not rejoining any more
}

TEST_CASE("A PS restore skips a full snapshot whose records do not hold for the one before",
          "[ps_shard]") {
  test::TempDir dir;
  PsShardState ps;
  REQUIRE(ps.create(def("w", {3})).ok());
  CHECK(ps.push(1, "w#0", tensor({3}, {1, 2, 3})).value());
  const auto first = ps.pull("w#0")->data;
  core::CheckpointManager fulls(dir.path(), 2, "ps");
  REQUIRE(fulls.save(ps.snapshot(), 0).ok());
  CHECK(ps.push(2, "w#0", tensor({3}, {1, 1, 1})).value());
  core::Checkpoint newer = ps.snapshot();
  newer.ints.erase("w#0/def");  // its checksums hold: only its content is wrong
  REQUIRE(fulls.save(newer, 1).ok());

  std::vector<core::Error> skipped;
  auto restored = actors::restore_ps_snapshots(dir.path(), &skipped);
  REQUIRE(restored.ok());
  REQUIRE(restored->has_value());
  CHECK((*restored)->full == 0);
  CHECK((*restored)->state->counters().updates_applied == 1);
  CHECK((*restored)->state->pull("w#0")->data == first);
  REQUIRE(skipped.size() == 1);
  CHECK(skipped[0].code == core::Errc::data_loss);
  CHECK_THAT(skipped[0].message,
             Catch::Contains("ps-1.tckpt") && Catch::Contains("record 'w#0' belongs to no"));

  // Neither holds: data_loss naming the newest, and no state.
  core::Checkpoint older = ps.snapshot();
  older.ints["w#0/def"][0] = int64_t{1} << 40;
  REQUIRE(fulls.save(older, 2).ok());  // keeps 2: ps-1 and ps-2
  auto none = actors::restore_ps_snapshots(dir.path());
  REQUIRE_FALSE(none.ok());
  CHECK(none.error().code == core::Errc::data_loss);
  CHECK_THAT(none.error().message,
             Catch::Contains("ps-2.tckpt") && Catch::Contains("out of range"));
}
