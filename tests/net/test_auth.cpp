// Membership: only a peer holding the job's secret gets past the tensor channel's door, a
// stranger is refused before it can send a frame, and the server must prove itself too.
#include <catch2/catch.hpp>

#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <caf/all.hpp>
#include <cstdlib>
#include <fstream>
#include <future>
#include <thread>

#include "actors/channel_server.hpp"
#include "actors/ps_shard.hpp"
#include "core/partitioner.hpp"
#include "helpers.hpp"
#include "net/auth.hpp"
#include "net/channel.hpp"
#include "net/socket_pair.hpp"

using namespace troupe;
using namespace std::chrono_literals;

namespace {

using Pair = test::SocketPair;

// The server's and the client's verdicts of one handshake.
// `server_is` and `client_dials` name the task each side means (empty: none).
std::pair<core::Status, core::Status> handshake(const std::string& server_secret,
                                                const std::string& client_secret,
                                                const std::string& server_is = {},
                                                const std::string& client_dials = {}) {
  Pair p;
  auto server = std::async(std::launch::async, [&] {
    auto st = net::authenticate_peer(p.a, server_secret, 2s, false, server_is);
    if (!st) p.a.shutdown();  // a refused peer is hung up on
    return st;
  });
  auto client = net::authenticate_to(p.b, client_secret, 2s, false, client_dials);
  return {server.get(), client};
}

}  // namespace

TEST_CASE("The handshake admits members and refuses anyone without the secret", "[net][auth]") {
  const std::string secret = "0123456789abcdef0123456789abcdef";
  auto [server_ok, client_ok] = handshake(secret, secret);
  CHECK(server_ok.ok());
  CHECK(client_ok.ok());

  auto [server_no, client_no] = handshake(secret, "another secret, 32 bytes long...");
  REQUIRE_FALSE(server_no.ok());
  CHECK(server_no.error().code == core::Errc::permission_denied);
  CHECK_FALSE(client_no.ok());  // and the client learns it was not let in

  // Found from outside: the proof said "a member", not "the task dialled", so a worker that
  // reached another task at its address (two tasks given one port) was let in. Both proofs
  // now name the task dialled: ps:0 refuses a member that meant ps:1, and that member
  // would refuse ps:0's answer.
  auto [as_ps0, for_ps0] = handshake(secret, secret, "ps:0", "ps:0");
  CHECK(as_ps0.ok());
  CHECK(for_ps0.ok());
  auto [ps0, meant_ps1] = handshake(secret, secret, "ps:0", "ps:1");
  REQUIRE_FALSE(ps0.ok());
  CHECK_THAT(ps0.error().message, Catch::Contains("no proof of the cluster secret for ps:0"));
  CHECK_FALSE(meant_ps1.ok());

  // A stranger that speaks the channel's protocol without the handshake: refused on its
  // first bytes, nothing read past them.
  Pair p;
  net::PsRequest r;
  r.op = static_cast<uint8_t>(net::PsOp::pull);
  r.items.push_back({"w#0", {}, {}});
  REQUIRE(net::send_request(p.b, r));
  auto st = net::authenticate_peer(p.a, secret, 2s);
  REQUIRE_FALSE(st.ok());
  CHECK(st.error().code == core::Errc::permission_denied);
  CHECK(st.error().message.find("not a Troupe handshake") != std::string::npos);

  // A peer that says nothing is given up on after the bound.
  Pair silent;
  const auto t0 = std::chrono::steady_clock::now();
  auto quiet = net::authenticate_peer(silent.a, secret, 200ms);
  REQUIRE_FALSE(quiet.ok());
  CHECK(quiet.error().message.find("within 200 ms") != std::string::npos);
  CHECK(std::chrono::steady_clock::now() - t0 < 5s);

  // An impostor server (no secret) cannot pass for the PS: the client refuses it.
  Pair fake;
  std::thread impostor([&] {
    const std::string challenge = std::string("TRA1") + std::string(32, 'n');
    REQUIRE(::write(fake.a.fd(), challenge.data(), challenge.size()) ==
            static_cast<ssize_t>(challenge.size()));
    char hello[68];
    size_t got = 0;
    while (got < sizeof hello) {
      const ssize_t n = ::read(fake.a.fd(), hello + got, sizeof hello - got);
      if (n <= 0) break;
      got += static_cast<size_t>(n);
    }
    const std::string guess(32, 'g');
    (void)::write(fake.a.fd(), guess.data(), guess.size());
  });
  auto fooled = net::authenticate_to(fake.b, secret, 2s);
  impostor.join();
  REQUIRE_FALSE(fooled.ok());
  CHECK(fooled.error().code == core::Errc::permission_denied);
}

TEST_CASE("The cluster secret comes from the environment, bad ones named", "[net][auth]") {
  ::unsetenv(net::cluster_secret_env);
  ::unsetenv(net::cluster_secret_file_env);
  CHECK(net::cluster_secret_from_env().value().empty());  // none: not authenticated
  {
    test::Env e(net::cluster_secret_env, "short");
    auto s = net::cluster_secret_from_env();
    REQUIRE_FALSE(s.ok());
    CHECK(s.error().message.find(net::cluster_secret_env) != std::string::npos);
  }
  test::TempDir dir;
  {
    test::Env e(net::cluster_secret_file_env, dir.file("missing"));
    auto s = net::cluster_secret_from_env();
    REQUIRE_FALSE(s.ok());
    CHECK(s.error().message.find(dir.file("missing")) != std::string::npos);
  }
  std::ofstream(dir.file("secret")) << "a secret of enough bytes\n";
  test::Env e(net::cluster_secret_file_env, dir.file("secret"));
  CHECK(net::cluster_secret_from_env().value() == "a secret of enough bytes");
  // One any user may rewrite is refused, naming it.
  ::chmod(dir.file("secret").c_str(), 0666);
  auto open = net::cluster_secret_from_env();
  REQUIRE_FALSE(open.ok());
  CHECK(open.error().message.find(dir.file("secret") + ": any user may write it") !=
        std::string::npos);
  ::chmod(dir.file("secret").c_str(), 0644);
  CHECK(net::cluster_secret_from_env().ok());
  const auto fresh = net::new_cluster_secret().value();
  CHECK(fresh.size() == 64);
  CHECK(fresh != net::new_cluster_secret().value());
}

TEST_CASE("A PS's tensor channel serves members and refuses strangers, counting them",
          "[net][auth]") {
  caf::actor_system_config cfg;
  troupe::net::add_wire_types(cfg);
  caf::actor_system sys{cfg};
  auto ps = sys.spawn(actors::ps_shard, actors::PsShardOptions{});
  caf::scoped_actor self{sys};
  net::VariableDef def;
  def.name = "w";
  def.shape = {4};
  def.init_kind = static_cast<int32_t>(core::Initializer::Kind::constant);
  def.init_value = 2.0f;
  def.optimizer = "sgd";
  self->request(ps, 5s, net::create_atom::value, def)
      .receive([](caf::ok_atom) {}, [&](caf::error& e) { FAIL(sys.render(e)); });
  const std::string secret = "the job's secret, 32 bytes long!";
  actors::ChannelServerOptions o;
  o.secret = secret;
  auto server = actors::ChannelServer::start(sys, ps, "127.0.0.1", o);
  REQUIRE(server.ok());
  const uint16_t port = (*server)->port();
  net::PsRequest pull;
  pull.op = static_cast<uint8_t>(net::PsOp::pull);
  pull.items.push_back({"w#0", {}, {}});

  // A stranger: straight to a pull. It gets a challenge, then the connection ends; no value.
  auto stranger = net::connect_to("127.0.0.1", port, 5s);
  REQUIRE(stranger.ok());
  REQUIRE(net::send_request(*stranger, pull));
  auto got = net::recv_reply(*stranger);
  CHECK_FALSE(got.ok());
  // With a wrong secret: refused too.
  auto wrong = net::connect_to("127.0.0.1", port, 5s);
  REQUIRE(wrong.ok());
  CHECK_FALSE(net::authenticate_to(*wrong, "not the job's secret at all....", 5s).ok());

  // A member: proves the secret, then pulls.
  auto member = net::connect_to("127.0.0.1", port, 5s);
  REQUIRE(member.ok());
  REQUIRE(net::authenticate_to(*member, secret, 5s).ok());
  REQUIRE(net::send_request(*member, pull));
  auto value = net::recv_reply(*member);
  REQUIRE(value.ok());
  REQUIRE(value->size() == 1);
  CHECK((*value)[0].tensor.data == std::vector<float>{2, 2, 2, 2});

  // The shard counted both refusals (the channel tells it as they happen).
  net::PsStats stats;
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (stats.channel_refused < 2 && std::chrono::steady_clock::now() < deadline)
    self->request(ps, 5s, net::stats_atom::value)
        .receive([&](std::vector<int64_t>& v) { stats = net::PsStats::from(v); },
                 [&](caf::error& e) { FAIL(sys.render(e)); });
  CHECK(stats.channel_refused == 2);
  net::PsStats counted;
  counted.channel_refused = 7;  // travels in the stats vector like every other field
  CHECK(net::PsStats::from(counted.to_vector()).channel_refused == 7);
  (*server)->stop();
  self->send_exit(ps, caf::exit_reason::user_shutdown);
}

TEST_CASE("A PS's tensor channel holds at most its cap of connections", "[net][auth]") {
  caf::actor_system_config cfg;
  troupe::net::add_wire_types(cfg);
  caf::actor_system sys{cfg};
  auto ps = sys.spawn(actors::ps_shard, actors::PsShardOptions{});
  caf::scoped_actor self{sys};
  const std::string secret = "the job's secret, 32 bytes long!";
  actors::ChannelServerOptions o;
  o.secret = secret;
  o.max_connections = 2;
  auto server = actors::ChannelServer::start(sys, ps, "127.0.0.1", o);
  REQUIRE(server.ok());
  const uint16_t port = (*server)->port();
  auto member = [&]() -> core::Expected<net::Socket> {
    auto s = net::connect_to("127.0.0.1", port, 5s);
    if (!s) return s.error();
    if (auto st = net::authenticate_to(*s, secret, 5s); !st) return st.error();
    return s;
  };
  auto first = member();
  auto second = member();
  REQUIRE(first.ok());
  REQUIRE(second.ok());
  // A third is closed once proven, before it costs a thread: nothing it sends is read.
  auto third = member();
  if (third.ok()) {
    net::set_io_timeout(*third, 10s);
    char byte = 0;
    CHECK(::recv(third->fd(), &byte, 1, 0) <= 0);
  }
  // Once a member leaves, there is room again (its thread is reaped on the next accept).
  first->close();
  bool admitted = false;
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!admitted && std::chrono::steady_clock::now() < deadline) {
    auto again = member();
    admitted = again.ok();
    if (!admitted) std::this_thread::yield();
  }
  CHECK(admitted);
  net::PsStats stats;
  self->request(ps, 5s, net::stats_atom::value)
      .receive([&](std::vector<int64_t>& v) { stats = net::PsStats::from(v); },
               [&](caf::error& e) { FAIL(sys.render(e)); });
  CHECK(stats.channel_refused >= 1);
  (*server)->stop();
  self->send_exit(ps, caf::exit_reason::user_shutdown);
}
