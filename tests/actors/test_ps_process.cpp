// A parameter server in its own process, on 127.0.0.1: variables live there, repeated
// closure ids are applied once, bad requests and strangers do not stop it.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <poll.h>
#include <unistd.h>

#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include <algorithm>
#include <filesystem>

#include "actors/ps_shard.hpp"
#include "core/checkpoint/checkpoint_manager.hpp"
#include "core/partitioner.hpp"
#include "helpers.hpp"
#include "net/auth.hpp"
#include "net/channel.hpp"
#include "net/cluster_spec.hpp"
#include "net/connect.hpp"
#include "net/gate.hpp"
#include "net/node.hpp"
#include "net/wire.hpp"
#include "process.hpp"

using namespace troupe;
using namespace std::chrono_literals;

namespace {

std::string ps_tf_config(uint16_t port) {
  net::ClusterSpec spec({{"ps", {"127.0.0.1:" + std::to_string(port)}}});
  return "TF_CONFIG=" + net::TFConfigClusterResolver::render(spec, {"ps", 0});
}

template <class T, class... Ts>
caf::expected<T> ask(caf::scoped_actor& self, const caf::actor& dst, Ts&&... xs) {
  caf::expected<T> out{caf::error{}};
  self->request(dst, 5s, std::forward<Ts>(xs)...)
      .receive([&](T& v) { out = std::move(v); }, [&](caf::error& e) { out = std::move(e); });
  return out;
}

void send_garbage(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  const char junk[] = "GET / HTTP/1.1\r\nHost: troupe\r\n\r\n\xff\xff\xff\xff garbage";
  (void)::write(fd, junk, sizeof junk);
  ::close(fd);
}

// `troupe serve` for ps:0, snapshotting every 20 ms under `dir`; the ps-0 folder is made
// here, so that a test can watch it before the PS writes its first snapshot.
std::vector<std::string> snapshotting_ps(const test::TempDir& dir) {
  std::filesystem::create_directories(dir.path() + "/ps-0");
  return {TROUPE_BIN_DIR "/troupe",    "serve", "--ps-snapshot-dir", dir.path(),
          "--ps-snapshot-interval-ms", "20"};
}

// Starts `argv` as ps:0 on `port` and waits until it serves.
std::unique_ptr<test::ChildProcess> start_ps(const std::vector<std::string>& argv, uint16_t port) {
  auto ps =
      std::make_unique<test::ChildProcess>(argv, std::vector<std::string>{ps_tf_config(port)});
  REQUIRE(ps->wait_for_stderr("ready ps:0", 30s));
  return ps;
}

// A client of ps:0 on 127.0.0.1:`port`: an actor system of its own, a scoped actor, and the
// PS actor's handle.
struct PsClient {
  explicit PsClient(uint16_t port) : port_(port), sys(configured(cfg)), self(sys) { reconnect(); }
  /// Connects again (after a restart): connect_with_retry waits out a proxy still cached
  /// for the address.
  void reconnect() {
    auto remote = net::connect_with_retry(sys, "127.0.0.1:" + std::to_string(port_), "ps:0", 5s);
    REQUIRE(remote.ok());
    ps = *remote;
  }
  static caf::actor_system_config& configured(caf::actor_system_config& c) {
    net::configure(c);
    return c;
  }

  uint16_t port_;
  caf::actor_system_config cfg;
  caf::actor_system sys;
  caf::scoped_actor self;
  caf::actor ps;
};

net::VariableDef constant_variable(const std::string& name, std::vector<int64_t> shape, float value,
                                   const std::string& optimizer) {
  net::VariableDef def;
  def.name = name;
  def.shape = std::move(shape);
  def.init_kind = static_cast<int32_t>(core::Initializer::Kind::constant);
  def.init_value = value;
  def.optimizer = optimizer;
  def.learning_rate = 0.1f;
  return def;
}

}  // namespace

TEST_CASE("A PS process holds variables and applies each closure id once", "[process][ps]") {
  const uint16_t port = test::free_loopback_port();
  test::ChildProcess ps({TROUPE_BIN_DIR "/troupe", "serve"}, {ps_tf_config(port)});
  REQUIRE(ps.wait_for_stderr("ready ps:0", 30s));

  caf::actor_system_config cfg;
  net::configure(cfg);
  caf::actor_system sys{cfg};
  auto remote = net::connect_with_retry(sys, "127.0.0.1:" + std::to_string(port), "ps:0", 30s);
  REQUIRE(remote);
  caf::scoped_actor self{sys};

  const auto def = constant_variable("dense/kernel", {2, 3}, 1.0f, "sgd");
  auto created = ask<caf::ok_atom>(self, *remote, net::create_atom::value, def);
  INFO((created ? std::string("ok") : sys.render(created.error())));
  REQUIRE(created);

  const net::WireTensor g{{2, 3}, {1, 1, 1, 1, 1, 1}};
  for (uint64_t closure : {1, 1, 2})
    REQUIRE(ask<bool>(self, *remote, net::push_atom::value, closure, net::shard_key(def), g));

  auto pulled = ask<net::WireTensor>(self, *remote, net::pull_atom::value, net::shard_key(def));
  REQUIRE(pulled);
  const auto& w = *pulled;
  CHECK(w.dims == std::vector<int64_t>{2, 3});
  for (float v : w.data)
    CHECK(v == Approx(0.8f));  // two updates of 0.1, not three

  // A bad request is answered with an error naming it; the server keeps serving.
  auto bad = ask<net::WireTensor>(self, *remote, net::pull_atom::value, std::string("no/such/var"));
  REQUIRE_FALSE(bad);
  CHECK(net::from_caf(bad.error()).code == core::Errc::not_found);
  // So does a stranger speaking another protocol.
  send_garbage(port);
  auto stats = ask<std::vector<int64_t>>(self, *remote, net::stats_atom::value);
  REQUIRE(stats);
  const auto& s = *stats;
  CHECK(s[2] == 2);  // applied
  CHECK(s[3] == 1);  // duplicate
  CHECK(ps.running());

  // The tensor channel serves the same shard, applies under the same at-most-once tags...
  auto channel_port = ask<int32_t>(self, *remote, net::channel_atom::value);
  REQUIRE(channel_port);
  REQUIRE(*channel_port > 0);
  auto channel = net::connect_to("127.0.0.1", static_cast<uint16_t>(*channel_port), 5s);
  REQUIRE(channel);
  net::PsRequest push_pull{
      static_cast<uint8_t>(net::PsOp::push_pull), 2, {{net::shard_key(def), {}, g}}};
  REQUIRE(net::send_request(*channel, push_pull));
  auto after = net::recv_reply(*channel);
  REQUIRE(after);
  REQUIRE(after->size() == 1);
  CHECK(after->front().tensor.dims == std::vector<int64_t>{2, 3});
  for (float v : after->front().tensor.data)
    CHECK(v == Approx(0.8f));  // tag 2 was applied through CAF already
  push_pull.tag = 3;
  REQUIRE(net::send_request(*channel, push_pull));
  after = net::recv_reply(*channel);
  REQUIRE(after);
  for (float v : after->front().tensor.data)
    CHECK(v == Approx(0.7f));
  // ...answers a bad item with an error frame and keeps the connection...
  net::PsRequest missing{static_cast<uint8_t>(net::PsOp::pull), 0, {{"no/such/var", {}, {}}}};
  REQUIRE(net::send_request(*channel, missing));
  auto refused = net::recv_reply(*channel);
  REQUIRE_FALSE(refused);
  CHECK(refused.error().code == core::Errc::not_found);
  CHECK(refused.error().message.find("no/such/var") != std::string::npos);
  // ...and a stranger writing garbage to it is turned away without disturbing anyone.
  send_garbage(static_cast<uint16_t>(*channel_port));
  CHECK(ps.wait_for_stderr("tensor channel: rejected a request from 127.0.0.1", 10s));
  REQUIRE(net::send_request(
      *channel,
      net::PsRequest{static_cast<uint8_t>(net::PsOp::pull), 0, {{net::shard_key(def), {}, {}}}}));
  auto value = net::recv_reply(*channel);
  REQUIRE(value);
  CHECK(value->front().tensor.data.front() == Approx(0.7f));
  CHECK(ps.running());

  caf::anon_send(*remote, net::shutdown_atom::value);
  auto status = ps.wait_exit(10s);
  REQUIRE(status.has_value());
  CHECK(WIFEXITED(*status));
  CHECK(WEXITSTATUS(*status) == 0);
}

TEST_CASE("A restarted PS process carries on from its snapshot", "[process][ps][restore]") {
  const uint16_t port = test::free_loopback_port();
  test::TempDir dir;
  const auto argv = snapshotting_ps(dir);
  auto ps = start_ps(argv, port);

  PsClient client(port);
  auto& self = client.self;
  const auto def = constant_variable("w", {2, 2}, 1.0f, "momentum");
  REQUIRE(ask<caf::ok_atom>(self, client.ps, net::create_atom::value, def));
  const net::WireTensor g{{2, 2}, {1, 1, 1, 1}};
  for (uint64_t closure : {1, 2})
    REQUIRE(ask<bool>(self, client.ps, net::push_atom::value, closure, net::shard_key(def), g));
  const auto before =
      ask<net::WireTensor>(self, client.ps, net::pull_atom::value, net::shard_key(def));
  REQUIRE(before);

  // Bounded wait for a snapshot on disk that has both updates (one every 20 ms): each
  // snapshot is renamed into the directory, so wait on inotify for that.
  core::CheckpointManager snapshots(dir.path() + "/ps-0", 2, "ps");
  auto has_both = [&] {
    auto latest = snapshots.restore_latest();
    return latest.ok() && latest->second.ints["updates_applied"] == std::vector<int64_t>{2};
  };
  const bool saved = test::wait_for_file_in(snapshots.directory(), has_both, 10s);
  REQUIRE(saved);

  ps->kill(SIGKILL);
  REQUIRE(ps->wait_exit(10s).has_value());
  ps = start_ps(argv, port);
  CHECK(ps->wait_for_stderr("restored from snapshot", 1s));
  // The old connection's proxy may still be cached for the address: connect_with_retry
  // waits it out.
  client.reconnect();
  const auto after =
      ask<net::WireTensor>(self, client.ps, net::pull_atom::value, net::shard_key(def));
  REQUIRE(after);
  CHECK(after->data == before->data);
  // Applied closure ids came back: a retried closure is still ignored.
  CHECK(ask<bool>(self, client.ps, net::push_atom::value, uint64_t{2}, net::shard_key(def), g) ==
        false);
  auto stats = ask<std::vector<int64_t>>(self, client.ps, net::stats_atom::value);
  REQUIRE(stats);
  CHECK(net::PsStats::from(*stats).restored_from == 2);    // restored from 2 updates
  CHECK(net::PsStats::from(*stats).snapshot_age_ms >= 0);  // the one it restored
  // The momentum slot came back: the next update matches one without the restart.
  REQUIRE(ask<bool>(self, client.ps, net::push_atom::value, uint64_t{3}, net::shard_key(def), g) ==
          true);
  const auto third =
      ask<net::WireTensor>(self, client.ps, net::pull_atom::value, net::shard_key(def));
  REQUIRE(third);
  // Momentum 0.9, lr 0.1, gradient 1: velocities 1, 1.9, 2.71; w = 1 - 0.1 * 5.61.
  CHECK(third->data[0] == Approx(1.0f - 0.1f * (1.0f + 1.9f + 2.71f)));

  // Every snapshot damaged: the PS refuses to start with a clear error, and deletes none.
  ps->kill(SIGKILL);
  REQUIRE(ps->wait_exit(10s).has_value());
  const auto files = snapshots.checkpoints();
  REQUIRE_FALSE(files.empty());
  for (const auto& [step, path] : files) {
    auto bytes = test::read_bytes(path);
    bytes[bytes.size() / 2] ^= 0x40;
    test::write_bytes(path, bytes);
  }
  ps = std::make_unique<test::ChildProcess>(argv, std::vector<std::string>{ps_tf_config(port)});
  CHECK(ps->wait_for_stderr("skipped a damaged PS snapshot", 10s));
  auto status = ps->wait_exit(10s);
  REQUIRE(status.has_value());
  CHECK(WEXITSTATUS(*status) == 1);
  CHECK(snapshots.checkpoints().size() == files.size());
}

TEST_CASE("troupe serve refuses a malformed TF_CONFIG with a clear error", "[process][tf_config]") {
  test::ChildProcess p(
      {TROUPE_BIN_DIR "/troupe", "serve"},
      {R"(TF_CONFIG={"cluster": {"ps": ["127.0.0.1:1"]}, "task": {"type": "ps", "index": 4}})"});
  auto status = p.wait_exit(10s);
  REQUIRE(status.has_value());
  CHECK(WEXITSTATUS(*status) == 2);
}

// A PS lost after the variables were created but before any update must still come back
// with them: the first snapshot is taken once they exist, not at the first update.
TEST_CASE("A PS killed before its first update comes back with its variables",
          "[process][ps][restore]") {
  const uint16_t port = test::free_loopback_port();
  test::TempDir dir;
  const auto argv = snapshotting_ps(dir);
  auto ps = start_ps(argv, port);
  PsClient client(port);
  auto& self = client.self;
  const auto def = constant_variable("embedding", {3, 2}, 0.5f, "sgd");
  REQUIRE(ask<caf::ok_atom>(self, client.ps, net::create_atom::value, def));

  core::CheckpointManager snapshots(dir.path() + "/ps-0", 2, "ps");
  REQUIRE(test::wait_for_file_in(
      snapshots.directory(), [&] { return !snapshots.checkpoints().empty(); }, 10s));
  ps->kill(SIGKILL);
  REQUIRE(ps->wait_exit(10s).has_value());
  ps = start_ps(argv, port);
  client.reconnect();
  const auto value =
      ask<net::WireTensor>(self, client.ps, net::pull_atom::value, net::shard_key(def));
  REQUIRE(value);
  CHECK(value->data == std::vector<float>(6, 0.5f));
  auto stats = ask<std::vector<int64_t>>(self, client.ps, net::stats_atom::value);
  REQUIRE(stats);
  CHECK(net::PsStats::from(*stats).restored_from == 0);  // -1 would be "not restored"
  caf::anon_send(client.ps, net::shutdown_atom::value);
  REQUIRE(ps->wait_exit(10s).has_value());
}

TEST_CASE("A PS process with a cluster secret lets no stranger through its CAF port",
          "[process][ps][gate]") {
  const std::string secret = "the job's secret, 32 bytes long!";
  const uint16_t port = test::free_loopback_port();
  test::ChildProcess ps({TROUPE_BIN_DIR "/troupe", "serve"},
                        {ps_tf_config(port), std::string(net::cluster_secret_env) + "=" + secret});
  REQUIRE(ps.wait_for_stderr("ready ps:0", 30s));

  caf::actor_system_config cfg;
  net::configure(cfg);
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  auto tunnel = net::tunnel_to("127.0.0.1", port, secret, {}, "ps:0");
  REQUIRE(tunnel.ok());
  auto member = net::connect_with_retry(sys, "127.0.0.1:" + std::to_string(*tunnel), "ps:0", 30s);
  REQUIRE(member);
  const auto def = constant_variable("w", {4}, 1.0f, "sgd");
  REQUIRE(ask<caf::ok_atom>(self, *member, net::create_atom::value, def));

  // Strangers, without the secret or with a wrong one, try to read, push, pre-claim a
  // closure id and shut the PS down: none of them gets a handle to send anything to.
  const net::WireTensor g{{4}, {1, 1, 1, 1}};
  const std::vector<caf::message> attempts = {
      caf::make_message(net::pull_atom::value, net::shard_key(def)),
      caf::make_message(net::push_atom::value, uint64_t{7}, net::shard_key(def), g),
      caf::make_message(net::push_atom::value, uint64_t{1}, net::shard_key(def), g),
      caf::make_message(net::shutdown_atom::value)};
  caf::actor_system_config stranger_cfg;
  net::configure(stranger_cfg);
  caf::actor_system stranger{stranger_cfg};
  auto wrong = net::tunnel_to("127.0.0.1", port, "not the job's secret, also 32 b.", {}, "ps:0");
  REQUIRE(wrong.ok());
  for (const auto& m : attempts) {
    for (uint16_t dial : {port, *wrong}) {
      auto handle = stranger.middleman().remote_actor("127.0.0.1", dial);
      CHECK_FALSE(handle);
      if (handle) caf::anon_send(*handle, m);
    }
  }
  // And one 32-byte BASP header announcing 4 GiB, raw.
  const unsigned char huge[32] = {0x01, 0, 0, 0, 0xff, 0xff, 0xff, 0xff};
  auto raw = net::connect_to("127.0.0.1", port, 5s);
  REQUIRE(raw.ok());
  REQUIRE(::write(raw->fd(), huge, sizeof huge) == 32);

  // Every one refused and counted; the PS is unharmed: nothing read or changed, it runs,
  // its memory did not grow by the announced 4 GiB, and closure 1 is still the member's.
  net::PsStats stats;
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (stats.port_refused < 9 && std::chrono::steady_clock::now() < deadline) {
    auto v = ask<std::vector<int64_t>>(self, *member, net::stats_atom::value);
    REQUIRE(v);
    stats = net::PsStats::from(*v);
  }
  CHECK(stats.port_refused == 9);
  CHECK(stats.pulls == 0);
  CHECK(stats.updates_applied == 0);
  CHECK(stats.rss_bytes < (int64_t{512} << 20));
  CHECK(ps.running());
  CHECK(ps.wait_for_stderr("CAF port " + std::to_string(port) + ": refused 127.0.0.1:", 5s));
  REQUIRE(ask<bool>(self, *member, net::push_atom::value, uint64_t{1}, net::shard_key(def), g));
  auto pulled = ask<net::WireTensor>(self, *member, net::pull_atom::value, net::shard_key(def));
  REQUIRE(pulled);
  CHECK(pulled->data.front() == Approx(0.9f));  // applied: the id was not pre-claimed

  caf::anon_send(*member, net::shutdown_atom::value);
  auto status = ps.wait_exit(10s);
  REQUIRE(status.has_value());
  CHECK(WIFEXITED(*status));
  CHECK(WEXITSTATUS(*status) == 0);
}

// Found from outside: behind each gate CAF listened on a loopback port of its own, and any
// local process (another user; a container of the same pod, which shares loopback) spoke
// BASP to it as a member would: read a PS, pushed into it, made it allocate 4 GiB. With a
// cluster secret a task now listens only behind its doors (CAF gets each admitted member
// through a socket pair): a process of another user, at every port a PS and a worker task
// listen on, gets the door's challenge and nothing else.
TEST_CASE("With a cluster secret a task listens only behind its doors: another user gets nothing",
          "[process][ps][gate]") {
  const std::string secret = "the job's secret, 32 bytes long!";
  const auto addresses = test::loopback_addresses(2);
  net::ClusterSpec spec({{"ps", {addresses[0]}}, {"worker", {addresses[1]}}});
  const std::string secret_env = std::string(net::cluster_secret_env) + "=" + secret;
  test::ChildProcess ps(
      {TROUPE_BIN_DIR "/troupe", "serve"},
      {"TF_CONFIG=" + net::TFConfigClusterResolver::render(spec, {"ps", 0}), secret_env});
  test::ChildProcess worker(
      {TROUPE_BIN_DIR "/troupe", "serve"},
      {"TF_CONFIG=" + net::TFConfigClusterResolver::render(spec, {"worker", 0}), secret_env});
  REQUIRE(ps.wait_for_stderr("ready ps:0", 30s));
  REQUIRE(worker.wait_for_stderr("ready worker:0", 30s));

  for (auto* task : {&ps, &worker}) {
    const auto ports = test::listening_ports(task->pid());
    const uint16_t own = task == &ps ? net::parse_host_port(addresses[0])->port
                                     : net::parse_host_port(addresses[1])->port;
    CHECK(ports.count(own) == 1);
    CHECK(ports.size() == (task == &ps ? 2u : 1u));  // a PS has its tensor channel too
    for (uint16_t port : ports) {
      INFO("port " << port << " of " << (task == &ps ? "ps:0" : "worker:0"));
      // A stranger who says nothing gets the 36-byte challenge (TRA1, a nonce) and no more.
      const auto got = test::read_as_another_user(port, 1500ms);
      CHECK(got.connected);
      CHECK(got.bytes.size() == 36);
      CHECK(got.bytes.substr(0, 4) == "TRA1");
    }
  }

  // Members still reach both through their gates.
  caf::actor_system_config cfg;
  net::configure(cfg);
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  auto reach = [&](const std::string& address, const std::string& who) {
    auto hp = net::parse_host_port(address);
    auto tunnel = net::tunnel_to(hp->host, hp->port, secret, {}, who);
    REQUIRE(tunnel.ok());
    auto found = net::connect_with_retry(sys, "127.0.0.1:" + std::to_string(*tunnel), who, 30s);
    REQUIRE(found);
    return found.value();
  };
  reach(addresses[1], "worker:0");
  auto member = reach(addresses[0], "ps:0");
  CHECK(ask<std::vector<int64_t>>(self, member, net::stats_atom::value));
  caf::anon_send(member, net::shutdown_atom::value);
  REQUIRE(ps.wait_exit(10s).has_value());
}

TEST_CASE("A PS killed between delta snapshots comes back with the rows of its last one",
          "[process][ps][restore][delta]") {
  const uint16_t port = test::free_loopback_port();
  test::TempDir dir;
  auto argv = snapshotting_ps(dir);
  argv.insert(argv.end(), {"--ps-snapshot-full-every", "1000"});  // one full, then deltas
  auto ps = start_ps(argv, port);
  PsClient client(port);
  auto& self = client.self;
  auto def = constant_variable("ids", {48, 4}, 0.0f, "adagrad");  // 48 rows at most
  def.dynamic = true;
  def.init_kind = static_cast<int32_t>(core::Initializer::Kind::random_uniform);
  def.init_value = 0.1f;
  REQUIRE(ask<caf::ok_atom>(self, client.ps, net::create_atom::value, def));
  const std::string shard = net::shard_key(def);

  // Rounds of pushes, each acknowledged and then waited for in a snapshot: the first is in
  // the full snapshot, the rest in deltas after it, with rows admitted, updated and evicted.
  std::vector<int64_t> keys_seen;
  uint64_t closure = 1;
  int64_t pushes = 0;
  const std::string snap_dir = dir.path() + "/ps-0";
  for (int round = 0; round < 4; ++round) {
    for (int step = 0; step < 5; ++step) {
      std::vector<int64_t> keys;
      for (int k = 0; k < 8; ++k)
        keys.push_back(int64_t{1000003} * (round * 23 + step * 5 + k) + 17);
      keys_seen.insert(keys_seen.end(), keys.begin(), keys.end());
      std::vector<float> g(keys.size() * 4, 0.1f * static_cast<float>(step + 1));
      REQUIRE(ask<bool>(self, client.ps, net::push_rows_atom::value, closure++, shard,
                        net::RowsUpdate{keys, {{static_cast<int64_t>(keys.size()), 4}, g}}) ==
              true);
      ++pushes;
    }
    auto saved = [&] {
      auto r = actors::restore_ps_snapshots(snap_dir);
      return r.ok() && *r && (*r)->state->counters().updates_applied == pushes;
    };
    REQUIRE(test::wait_for_file_in(snap_dir, saved, 10s));
  }
  const auto before =
      ask<net::WireTensor>(self, client.ps, net::pull_rows_atom::value, shard, keys_seen);
  REQUIRE(before);
  auto stats = ask<std::vector<int64_t>>(self, client.ps, net::stats_atom::value);
  REQUIRE(stats);
  const auto st = net::PsStats::from(*stats);
  CHECK(st.rows_evicted > 0);
  CHECK(st.snapshot_full_bytes > 0);
  CHECK(st.snapshot_delta_bytes > 0);
  auto chain = actors::restore_ps_snapshots(snap_dir);
  REQUIRE(chain.ok());
  REQUIRE(chain->has_value());
  CHECK((*chain)->deltas >= 3);

  ps->kill(SIGKILL);
  REQUIRE(ps->wait_exit(10s).has_value());
  ps = start_ps(argv, port);
  CHECK(ps->wait_for_stderr("deltas in", 1s));
  client.reconnect();
  const auto after =
      ask<net::WireTensor>(self, client.ps, net::pull_rows_atom::value, shard, keys_seen);
  REQUIRE(after);
  CHECK(after->data == before->data);  // every row acknowledged, evictions included
  // The last closure's tag came back with its delta: its retry is not applied again.
  CHECK(ask<bool>(self, client.ps, net::push_rows_atom::value, closure - 1, shard,
                  net::RowsUpdate{{17}, {{1, 4}, {1, 1, 1, 1}}}) == false);

  // A damaged newest delta: the PS restores the chain up to the delta before it, says so.
  ps->kill(SIGKILL);
  REQUIRE(ps->wait_exit(10s).has_value());
  auto deltas =
      core::CheckpointManager(snap_dir, 0, "delta-" + std::to_string((*chain)->full)).checkpoints();
  REQUIRE(deltas.size() >= 3);
  std::sort(deltas.begin(), deltas.end());
  auto bytes = test::read_bytes(deltas.back().second);
  bytes[bytes.size() / 2] ^= 0x10;
  test::write_bytes(deltas.back().second, bytes);
  ps = start_ps(argv, port);
  CHECK(ps->wait_for_stderr("skipped a damaged PS snapshot: " + deltas.back().second, 1s));
  client.reconnect();
  stats = ask<std::vector<int64_t>>(self, client.ps, net::stats_atom::value);
  REQUIRE(stats);
  CHECK(net::PsStats::from(*stats).restored_from < pushes);
  CHECK(net::PsStats::from(*stats).restored_from > 5);  // the full one and some deltas
  caf::anon_send(client.ps, net::shutdown_atom::value);
  REQUIRE(ps->wait_exit(10s).has_value());
}
