// Requests through a PS task's tensor channel are served on the shards its actor shares
// (actors/shared_shard.hpp), without the actor: pulls never see a row half updated, updates
// land in order and at most once, and a snapshot the actor takes meanwhile holds each
// shard whole, with the tags of exactly the updates in it.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <caf/all.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "actors/channel_server.hpp"
#include "actors/ps_shard.hpp"
#include "actors/shared_shard.hpp"
#include "core/checkpoint/checkpoint_manager.hpp"
#include "core/partitioner.hpp"
#include "net/channel.hpp"

using namespace troupe;
using namespace std::chrono_literals;

namespace {

struct System {
  caf::actor_system_config cfg;
  caf::actor_system sys;
  System() : sys(troupe::net::add_wire_types(cfg)) {}
};

// An actor that takes batched requests and never answers them: whatever the channel
// answers, it answered without the actor.
struct SilentState {
  std::vector<caf::response_promise> held;
  static inline const char* name = "test.silent_shard";
};
caf::behavior silent_shard(caf::stateful_actor<SilentState>* self) {
  return {[=](net::batch_atom, net::PsRequest&) {
    self->state.held.push_back(self->make_response_promise());
  }};
}

net::VariableDef table(const std::string& name, int64_t rows, int64_t width) {
  net::VariableDef def;
  def.name = name;
  def.shape = {rows, width};
  def.init_kind = static_cast<int32_t>(core::Initializer::Kind::constant);
  def.init_value = 2.0f;
  def.optimizer = "sgd";
  def.learning_rate = 0.5f;
  return def;
}

net::PsRequest pull_rows(const std::string& key, std::vector<int64_t> rows) {
  net::PsRequest r{static_cast<uint8_t>(net::PsOp::pull_rows), 0, {}};
  r.items.push_back({key, std::move(rows), {}});
  return r;
}

net::PsRequest push_rows(const std::string& key, uint64_t closure, std::vector<int64_t> rows,
                         int64_t width) {
  net::PsRequest r{static_cast<uint8_t>(net::PsOp::push_rows), closure << 16, {}};
  const auto n = static_cast<int64_t>(rows.size());
  r.items.push_back({key,
                     std::move(rows),
                     {{n, width}, std::vector<float>(static_cast<size_t>(n * width), 1.0f)}});
  return r;
}

core::Expected<std::vector<net::PsItem>> ask(const net::Socket& s, const net::PsRequest& r) {
  if (auto st = net::send_request(s, r); !st) return st.error();
  return net::recv_reply(s);
}

}  // namespace

TEST_CASE("a PS channel answers pulls and updates on the shared shards without the actor",
          "[actors][channel]") {
  System s;
  auto shared = std::make_shared<actors::SharedShard>();
  REQUIRE(shared->state.create(table("t", 100, 4)).ok());
  const caf::actor silent = s.sys.spawn(silent_shard);
  actors::ChannelServerOptions o;
  o.answer_timeout = 300ms;
  auto server = actors::ChannelServer::start(s.sys, silent, "127.0.0.1", o, shared);
  REQUIRE(server.ok());
  auto member = net::connect_to("127.0.0.1", (*server)->port(), 10s);
  REQUIRE(member.ok());

  auto rows = ask(*member, pull_rows("t#0", {3, 7}));
  REQUIRE(rows.ok());
  CHECK((*rows)[0].tensor.dims == std::vector<int64_t>{2, 4});
  CHECK((*rows)[0].tensor.data == std::vector<float>(8, 2.0f));
  CHECK(shared->pulls == 1);
  // A bad pull is an error, counted, and the connection serves on.
  auto missing = ask(*member, pull_rows("nope#0", {1}));
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().code == core::Errc::not_found);
  auto outside = ask(*member, pull_rows("t#0", {100}));
  REQUIRE_FALSE(outside.ok());
  CHECK(outside.error().code == core::Errc::out_of_range);
  CHECK(shared->rejected == 2);
  // An update is applied on the shards too (the actor here never answers), once.
  REQUIRE(ask(*member, push_rows("t#0", 1, {3}, 4)).ok());
  REQUIRE(ask(*member, push_rows("t#0", 1, {3}, 4)).ok());  // the same closure again
  auto after = ask(*member, pull_rows("t#0", {3, 7}));
  REQUIRE(after.ok());
  CHECK((*after)[0].tensor.data == std::vector<float>{1.5f, 1.5f, 1.5f, 1.5f, 2, 2, 2, 2});
  CHECK(shared->state.counters().updates_applied == 1);
  CHECK(shared->state.counters().updates_duplicate == 1);
  // A bad update is an error, counted by the state, and changes nothing.
  auto beyond = ask(*member, push_rows("t#0", 2, {100}, 4));
  REQUIRE_FALSE(beyond.ok());
  CHECK(shared->state.counters().requests_rejected == 1);
  CHECK(shared->state.counters().updates_applied == 1);
  (*server)->stop();

  // With the direct path off, pulls and updates wait for the actor.
  o.direct = false;
  auto through_actor = actors::ChannelServer::start(s.sys, silent, "127.0.0.1", o, shared);
  REQUIRE(through_actor.ok());
  auto other = net::connect_to("127.0.0.1", (*through_actor)->port(), 10s);
  REQUIRE(other.ok());
  auto waited = ask(*other, pull_rows("t#0", {3}));
  REQUIRE_FALSE(waited.ok());
  CHECK(waited.error().code == core::Errc::unavailable);
  auto other2 = net::connect_to("127.0.0.1", (*through_actor)->port(), 10s);
  REQUIRE(other2.ok());
  auto held = ask(*other2, push_rows("t#0", 3, {3}, 4));
  REQUIRE_FALSE(held.ok());
  CHECK(held.error().code == core::Errc::unavailable);
  CHECK(shared->state.counters().updates_applied == 1);
  (*through_actor)->stop();
  caf::anon_send_exit(silent, caf::exit_reason::user_shutdown);
}

TEST_CASE("direct pulls see every direct update whole, in order, and each at most once",
          "[actors][channel]") {
  System s;
  constexpr int64_t rows = 16, width = 1024, pushes = 150;
  auto shared = std::make_shared<actors::SharedShard>();
  actors::PsShardOptions po;
  po.shared = shared;
  const caf::actor ps = s.sys.spawn(actors::ps_shard, po);
  {
    caf::scoped_actor self{s.sys};
    self->request(ps, 5s, net::create_atom::value, table("t", rows, width))
        .receive([](caf::ok_atom) {}, [&](caf::error& e) { FAIL(s.sys.render(e)); });
  }
  auto server = actors::ChannelServer::start(s.sys, ps, "127.0.0.1", {}, shared);
  REQUIRE(server.ok());
  const uint16_t port = (*server)->port();
  std::vector<int64_t> all(rows);
  for (int64_t r = 0; r < rows; ++r)
    all[static_cast<size_t>(r)] = r;

  // Each push subtracts 0.5 (lr) from every value of the 16 rows; two readers pull them
  // meanwhile. A pull must find each row's 1024 values equal (no update half seen), equal
  // across rows (an update covers them all), and never higher than the pull before it.
  std::atomic<bool> pushing{true};
  std::atomic<int64_t> torn{0}, backwards{0}, pulls{0};
  auto reader = [&] {
    auto c = net::connect_to("127.0.0.1", port, 10s);
    REQUIRE(c.ok());
    float last = 3.0f;
    while (pushing.load()) {
      auto got = ask(*c, pull_rows("t#0", all));
      REQUIRE(got.ok());
      const auto& v = (*got)[0].tensor.data;
      for (float x : v)
        if (x != v[0]) {
          ++torn;
          break;
        }
      if (v[0] > last) ++backwards;
      last = v[0];
      ++pulls;
    }
  };
  std::thread r1(reader), r2(reader);
  auto writer = net::connect_to("127.0.0.1", port, 10s);
  REQUIRE(writer.ok());
  for (uint64_t i = 1; i <= pushes; ++i)
    REQUIRE(ask(*writer, push_rows("t#0", i, all, width)).ok());
  // A push of a closure applied before is ignored (at most once).
  REQUIRE(ask(*writer, push_rows("t#0", pushes / 2, all, width)).ok());
  pushing = false;
  r1.join();
  r2.join();
  CHECK(torn == 0);
  CHECK(backwards == 0);
  CHECK(pulls > 0);
  auto last = ask(*writer, pull_rows("t#0", all));
  REQUIRE(last.ok());
  CHECK((*last)[0].tensor.data ==
        std::vector<float>(static_cast<size_t>(rows * width), 2.0f - 0.5f * pushes));
  // The shard's stats count the channel's pulls with the actor's.
  caf::scoped_actor self{s.sys};
  self->request(ps, 5s, net::stats_atom::value)
      .receive(
          [&](const std::vector<int64_t>& v) {
            const auto st = net::PsStats::from(v);
            CHECK(st.pulls == pulls.load() + 1);
            CHECK(st.updates_applied == pushes);
            CHECK(st.updates_duplicate == 1);
          },
          [&](caf::error& e) { FAIL(s.sys.render(e)); });
  (*server)->stop();
  caf::anon_send_exit(ps, caf::exit_reason::user_shutdown);
}

TEST_CASE("a snapshot taken while the channel applies updates holds each shard whole, tags too",
          "[actors][channel]") {
  System s;
  // 4 MiB shards, so that copying one takes long enough for updates to come during it.
  constexpr int64_t rows = 4096, width = 256;
  char tmpl[] = "/tmp/troupe-direct-snap-XXXXXX";
  const std::string dir = ::mkdtemp(tmpl);
  auto shared = std::make_shared<actors::SharedShard>();
  actors::PsShardOptions po;
  po.shared = shared;
  po.snapshot_dir = dir;
  po.snapshot_interval = std::chrono::hours(1);  // only the snapshots this test asks for
  const caf::actor ps = s.sys.spawn(actors::ps_shard, po);
  caf::scoped_actor self{s.sys};
  for (const char* name : {"t", "u"})
    self->request(ps, 5s, net::create_atom::value, table(name, rows, width))
        .receive([](caf::ok_atom) {}, [&](caf::error& e) { FAIL(s.sys.render(e)); });
  auto server = actors::ChannelServer::start(s.sys, ps, "127.0.0.1", {}, shared);
  REQUIRE(server.ok());
  const std::vector<int64_t> ends{0, rows - 1};  // copied first and last
  auto ones = [&] { return net::WireTensor{{2, width}, std::vector<float>(2 * width, 1.0f)}; };

  // Closure i updates the first and the last row of t when odd, of u when even, by -0.5,
  // while the actor copies the shards (one per turn) and writes snapshots. Each snapshot
  // must hold each shard as one state: both rows equal (an update that came during the
  // copy would be in the last row only), and the tags of exactly the k updates in them.
  std::atomic<bool> pushing{true};
  std::atomic<bool> writer_failed{false};
  std::thread writer([&] {
    auto c = net::connect_to("127.0.0.1", (*server)->port(), 10s);
    if (!c) writer_failed = true;
    for (uint64_t i = 1; c && pushing.load(); ++i)
      if (!ask(*c, push_rows(i % 2 ? "t#0" : "u#0", i, ends, width)).ok()) {
        writer_failed = true;  // the test's thread reports it (a REQUIRE here would abort)
        break;
      }
  });
  struct Stop {  // on every way out of the test, a failed REQUIRE's too
    std::atomic<bool>& pushing;
    std::thread& writer;
    ~Stop() {
      pushing = false;
      if (writer.joinable()) writer.join();
    }
  } stop{pushing, writer};
  auto snapshots = [&] {
    int64_t n = 0;
    self->request(ps, 5s, net::stats_atom::value)
        .receive([&](const std::vector<int64_t>& v) { n = net::PsStats::from(v).snapshots; },
                 [&](caf::error& e) { FAIL(s.sys.render(e)); });
    return n;
  };
  int checked = 0, mid_stream = 0;
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  for (int64_t seen = snapshots(); checked < 8 && std::chrono::steady_clock::now() < deadline;) {
    // One snapshot at a time, taken while updates keep coming; its file is read once it is
    // written and before the next is asked for (so no write or pruning races the read).
    self->send(ps, net::snapshot_atom::value);
    int64_t now = seen;
    while (now == seen && std::chrono::steady_clock::now() < deadline)
      now = snapshots();  // asks the actor again: a bounded wait on its own
    if (now == seen) break;
    seen = now;
    auto saved = core::CheckpointManager(dir, 2, "ps").restore_latest();
    REQUIRE(saved.ok());
    auto restored = actors::PsShardState::from_snapshot(saved->second);
    REQUIRE(restored.ok());
    for (const uint64_t first : {uint64_t{1}, uint64_t{2}}) {  // t's closures, u's
      const std::string key = first == 1 ? "t#0" : "u#0";
      const auto value = restored->pull_rows(key, ends).value().data;
      INFO(key << ": first row " << value[0] << ", last row " << value[width]);
      REQUIRE(std::all_of(value.begin(), value.end(), [&](float x) { return x == value[0]; }));
      const auto k = static_cast<uint64_t>(std::lround((2.0f - value[0]) / 0.5f));
      if (k > 0) ++mid_stream;
      // The k-th update of this shard is in it (applying it again does nothing), the next
      // one is not.
      if (k > 0)
        CHECK_FALSE(restored->push_rows((first + 2 * (k - 1)) << 16, key, {ends, ones()}).value());
      CHECK(restored->push_rows((first + 2 * k) << 16, key, {ends, ones()}).value());
    }
    ++checked;
  }
  pushing = false;
  writer.join();
  CHECK_FALSE(writer_failed);
  CHECK(checked == 8);
  CHECK(mid_stream > 0);
  (*server)->stop();
  caf::anon_send_exit(ps, caf::exit_reason::user_shutdown);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

TEST_CASE("A PS task refuses requests routed by an older placement epoch than it knows",
          "[actors][channel][replicas]") {
  // After a failover the chief tells every PS task the new epoch; a worker that has not
  // heard of it yet must not update a replica behind the promoted one's back, on the
  // channel or through the actor. A newer epoch in a request is adopted.
  System s;
  auto shared = std::make_shared<actors::SharedShard>();
  actors::PsShardOptions po;
  po.shared = shared;
  const caf::actor ps = s.sys.spawn(actors::ps_shard, po);
  caf::scoped_actor self{s.sys};
  self->request(ps, 5s, net::create_atom::value, table("t", 8, 2))
      .receive([](caf::ok_atom) {}, [&](caf::error& e) { FAIL(s.sys.render(e)); });
  auto server = actors::ChannelServer::start(s.sys, ps, "127.0.0.1", {}, shared);
  REQUIRE(server.ok());
  auto member = net::connect_to("127.0.0.1", (*server)->port(), 10s);
  REQUIRE(member.ok());

  REQUIRE(ask(*member, push_rows("t#0", 1, {0}, 2)).ok());  // epoch 0 while it knows 0
  self->send(ps, net::failover_atom::value, uint64_t{2}, std::vector<int32_t>{1},
             std::vector<int32_t>{});
  // The actor handles messages in order: once it answers stats, it has the epoch.
  self->request(ps, 5s, net::stats_atom::value)
      .receive([](std::vector<int64_t>&) {}, [&](caf::error& e) { FAIL(s.sys.render(e)); });
  CHECK(shared->epoch == 2);

  auto stale = push_rows("t#0", 2, {0}, 2);
  stale.epoch = 1;
  auto refused = ask(*member, stale);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().code == core::Errc::unavailable);
  CHECK_THAT(refused.error().message, Catch::Contains("epoch 1") && Catch::Contains("epoch 2"));
  auto stale_pull = pull_rows("t#0", {0});
  stale_pull.epoch = 1;
  CHECK_FALSE(ask(*member, stale_pull).ok());
  std::optional<caf::error> through_actor;
  self->request(ps, 5s, net::batch_atom::value, stale)
      .receive([](std::vector<net::PsItem>&) {}, [&](caf::error& e) { through_actor = e; });
  REQUIRE(through_actor.has_value());
  CHECK(net::from_caf(*through_actor).code == core::Errc::unavailable);
  CHECK(shared->state.counters().updates_applied == 1);  // neither stale push landed

  auto newer = push_rows("t#0", 3, {0}, 2);
  newer.epoch = 3;
  REQUIRE(ask(*member, newer).ok());
  CHECK(shared->epoch == 3);
  CHECK(shared->state.counters().updates_applied == 2);
  auto now = pull_rows("t#0", {0});
  now.epoch = 3;
  auto row = ask(*member, now);
  REQUIRE(row.ok());
  CHECK((*row)[0].tensor.data == std::vector<float>{1.0f, 1.0f});  // 2 - 2 x 0.5
  (*server)->stop();
  caf::anon_send_exit(ps, caf::exit_reason::user_shutdown);
}

TEST_CASE("A PS task whose lease from the chief lapsed refuses workers until it is renewed",
          "[actors][channel][replicas]") {
  // With replicated shards the chief renews each task's lease with every poll. One cut
  // off from the chief stops serving when the lease lapses (before the chief, past its
  // heartbeat timeout, promotes another copy): no read of a value older than the promoted
  // copy's, no update that copy never sees. A task never given a lease refuses nothing.
  System s;
  auto shared = std::make_shared<actors::SharedShard>();
  actors::PsShardOptions po;
  po.shared = shared;
  const caf::actor ps = s.sys.spawn(actors::ps_shard, po);
  caf::scoped_actor self{s.sys};
  self->request(ps, 5s, net::create_atom::value, table("t", 8, 2))
      .receive([](caf::ok_atom) {}, [&](caf::error& e) { FAIL(s.sys.render(e)); });
  auto server = actors::ChannelServer::start(s.sys, ps, "127.0.0.1", {}, shared);
  REQUIRE(server.ok());
  auto member = net::connect_to("127.0.0.1", (*server)->port(), 10s);
  REQUIRE(member.ok());
  REQUIRE(ask(*member, pull_rows("t#0", {0})).ok());  // no lease yet: served

  self->send(ps, net::lease_atom::value, int64_t{60000});
  self->request(ps, 5s, net::stats_atom::value)  // in order behind the lease
      .receive([](std::vector<int64_t>&) {}, [&](caf::error& e) { FAIL(s.sys.render(e)); });
  REQUIRE(ask(*member, pull_rows("t#0", {0})).ok());  // within it
  // A lease of 0 ms lapses at once: what a task cut off from the chief reaches.
  self->send(ps, net::lease_atom::value, int64_t{0});
  self->request(ps, 5s, net::stats_atom::value)
      .receive([](std::vector<int64_t>&) {}, [&](caf::error& e) { FAIL(s.sys.render(e)); });
  REQUIRE_FALSE(shared->leased().ok());
  auto read = ask(*member, pull_rows("t#0", {0}));
  REQUIRE_FALSE(read.ok());
  CHECK(read.error().code == core::Errc::unavailable);
  CHECK_THAT(read.error().message, Catch::Contains("lease"));
  auto push = ask(*member, push_rows("t#0", 1, {0}, 2));
  REQUIRE_FALSE(push.ok());
  std::optional<caf::error> through_actor;
  self->request(ps, 5s, net::batch_atom::value, push_rows("t#0", 2, {0}, 2))
      .receive([](std::vector<net::PsItem>&) {}, [&](caf::error& e) { through_actor = e; });
  REQUIRE(through_actor.has_value());
  CHECK(net::from_caf(*through_actor).code == core::Errc::unavailable);
  CHECK(shared->state.counters().updates_applied == 0);

  self->send(ps, net::lease_atom::value, int64_t{60000});  // renewed: serving again
  self->request(ps, 5s, net::stats_atom::value)
      .receive([](std::vector<int64_t>&) {}, [&](caf::error& e) { FAIL(s.sys.render(e)); });
  REQUIRE(ask(*member, push_rows("t#0", 3, {0}, 2)).ok());
  CHECK(shared->state.counters().updates_applied == 1);
  (*server)->stop();
  caf::anon_send_exit(ps, caf::exit_reason::user_shutdown);
}
