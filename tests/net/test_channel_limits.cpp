// The tensor channel's guards against members that misbehave: a memory budget shared by all
// connections, an end to a connection that stalls inside a frame or idles between frames.
#include <catch2/catch.hpp>

#include <caf/all.hpp>
#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "actors/channel_server.hpp"
#include "actors/ps_shard.hpp"
#include "core/partitioner.hpp"
#include "helpers.hpp"
#include "net/auth.hpp"
#include "net/byte_budget.hpp"
#include "net/channel.hpp"
#include "net/tls.hpp"
#include "socket_pair.hpp"

using namespace troupe;
using namespace std::chrono_literals;

namespace {

// The bytes send_request writes for `r`.
std::string frame_bytes(const net::PsRequest& r) {
  test::SocketPair p;
  std::thread writer([&] {
    REQUIRE(net::send_request(p.a, r));
    p.a.close();
  });
  std::string bytes;
  char buf[65536];
  for (ssize_t n; (n = ::recv(p.b.fd(), buf, sizeof buf, 0)) > 0;)
    bytes.append(buf, static_cast<size_t>(n));
  writer.join();
  return bytes;
}

net::PsRequest push_of(const std::string& name, size_t floats) {
  net::PsRequest r;
  r.op = static_cast<uint8_t>(net::PsOp::push);
  r.tag = 1;
  net::PsItem item;
  item.name = name;
  item.tensor.dims = {static_cast<int64_t>(floats)};
  item.tensor.data.assign(floats, 0.5f);
  r.items.push_back(std::move(item));
  return r;
}

net::PsRequest pull_of(const std::string& name) {
  net::PsRequest r;
  r.op = static_cast<uint8_t>(net::PsOp::pull);
  r.items.push_back({name, {}, {}});
  return r;
}

struct ChannelFixture {
  caf::actor_system_config cfg;
  caf::actor_system sys;
  caf::actor ps;
  ChannelFixture() : sys(troupe::net::add_wire_types(cfg)) {
    ps = sys.spawn(actors::ps_shard, actors::PsShardOptions{});
  }
  ~ChannelFixture() { caf::anon_send_exit(ps, caf::exit_reason::user_shutdown); }
  void create(const std::string& name, int64_t n) {
    net::VariableDef def;
    def.name = name;
    def.shape = {n};
    def.init_kind = static_cast<int32_t>(core::Initializer::Kind::constant);
    def.init_value = 2.0f;
    def.optimizer = "sgd";
    caf::scoped_actor self{sys};
    self->request(ps, 5s, net::create_atom::value, def)
        .receive([](caf::ok_atom) {}, [&](caf::error& e) { FAIL(sys.render(e)); });
  }
};

}  // namespace

TEST_CASE("ByteBudget grants up to its capacity, waits for room, never grants more",
          "[net][channel][limits]") {
  net::ByteBudget b(100);
  net::ByteBudget::Lease x, y, z;
  CHECK(b.reserve(60, 0ms, x) == net::ByteBudget::Outcome::granted);
  CHECK(b.reserve(101, 1s, y) == net::ByteBudget::Outcome::too_large);
  CHECK(b.reserve(50, 20ms, y) == net::ByteBudget::Outcome::timed_out);
  CHECK(b.held() == 60);
  std::thread giver([&] { x.release(); });
  CHECK(b.reserve(50, 10s, y) == net::ByteBudget::Outcome::granted);  // once x gave back
  giver.join();
  CHECK(b.held() == 50);
  z = std::move(y);  // moved: held once, given back once
  CHECK(b.held() == 50);
  CHECK_FALSE(b.wait_held([](uint64_t h) { return h == 0; }, 20ms));
  std::thread releaser([&] { z.release(); });
  CHECK(b.wait_held([](uint64_t h) { return h == 0; }, 10s));  // woken by the give-back
  releaser.join();
  CHECK(b.held() == 0);
}

TEST_CASE("A PS's tensor channel holds requests to its memory budget and ends a stalled frame",
          "[net][channel][limits]") {
  ChannelFixture f;
  constexpr size_t floats = 128 * 1024;  // 512 KiB of payload per push
  f.create("w", floats);
  actors::ChannelServerOptions o;
  o.memory_budget = 1 << 20;  // room for one such push, not two
  o.stall_timeout = 400ms;
  auto server = actors::ChannelServer::start(f.sys, f.ps, "127.0.0.1", o);
  REQUIRE(server.ok());
  const uint16_t port = (*server)->port();

  // A member that sends a push's header and most of its payload, then stalls: it holds
  // the push's memory in the budget.
  const std::string stalled = frame_bytes(push_of("w#0", floats));
  auto staller = net::connect_to("127.0.0.1", port, 10s);
  REQUIRE(staller.ok());
  REQUIRE(::send(staller->fd(), stalled.data(), stalled.size() - 1000, MSG_NOSIGNAL) ==
          static_cast<ssize_t>(stalled.size() - 1000));
  REQUIRE((*server)->wait_memory_held([&](uint64_t held) { return held >= floats * sizeof(float); },
                                      10s));

  // A second member's push must wait: it is not answered while the stalled frame holds the
  // budget (at least the stall timeout after the staller's last byte) ...
  auto member = net::connect_to("127.0.0.1", port, 10s);
  REQUIRE(member.ok());
  REQUIRE(net::send_request(*member, push_of("w#0", floats)));
  CHECK_FALSE(net::wait_readable(*member, 150ms));
  // ... and is, once the stalled connection is ended and its memory given back.
  auto reply = net::recv_reply(*member);
  CHECK(reply.ok());
  auto cut = net::recv_reply(*staller);  // the error the server wrote before it hung up
  REQUIRE_FALSE(cut.ok());
  CHECK(cut.error().message.find("timed out") != std::string::npos);
  CHECK((*server)->wait_memory_held([](uint64_t held) { return held == 0; }, 10s));

  // A frame larger than the whole budget is refused at its header, before any allocation
  // (only the header is sent: the server reads no further).
  auto big = net::connect_to("127.0.0.1", port, 10s);
  REQUIRE(big.ok());
  const std::string header = frame_bytes(push_of("w#0", 2 * floats)).substr(0, 48);
  REQUIRE(::send(big->fd(), header.data(), header.size(), MSG_NOSIGNAL) == 48);
  auto refused = net::recv_reply(*big);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().code == core::Errc::invalid_argument);
  CHECK(refused.error().message.find("memory budget") != std::string::npos);
  (*server)->stop();
}

TEST_CASE("A PS's tensor channel ends a connection idle past its idle timeout",
          "[net][channel][limits]") {
  ChannelFixture f;
  f.create("v", 4);
  for (bool pooled : {false, true}) {  // a thread per connection, and request by request
    INFO("pooled " << pooled);
    actors::ChannelServerOptions o;
    o.idle_timeout = 300ms;
    o.pooled = pooled;
    auto server = actors::ChannelServer::start(f.sys, f.ps, "127.0.0.1", o);
    REQUIRE(server.ok());
    auto member = net::connect_to("127.0.0.1", (*server)->port(), 10s);
    REQUIRE(member.ok());
    const net::PsRequest pull = pull_of("v#0");
    // Used, it is served; left idle, the server ends it (with an error frame naming why).
    REQUIRE(net::send_request(*member, pull));
    REQUIRE(net::recv_reply(*member).ok());
    REQUIRE(net::wait_readable(*member, 10s));
    auto ended = net::recv_reply(*member);
    REQUIRE_FALSE(ended.ok());
    CHECK(ended.error().message.find("idle") != std::string::npos);
    (*server)->stop();
  }
}

TEST_CASE("TROUPE_CHANNEL_MEMORY_MB sets a PS channel budget, and a bad value is named",
          "[net][channel][limits]") {
  {
    test::Env unset(actors::channel_memory_env, nullptr);
    auto o = actors::ChannelServerOptions::from_env("s");
    REQUIRE(o.ok());
    CHECK(o->memory_budget == net::channel_memory_budget);
    CHECK(o->secret == "s");
  }
  {
    test::Env set(actors::channel_memory_env, "512");
    CHECK(actors::ChannelServerOptions::from_env("").value().memory_budget == (512u << 20));
  }
  for (const char* bad : {"", "0", "-1", "12x", "99999999999999999999", "16777217"}) {
    test::Env set(actors::channel_memory_env, bad);
    auto o = actors::ChannelServerOptions::from_env("");
    REQUIRE_FALSE(o.ok());
    CHECK(o.error().code == core::Errc::invalid_argument);
    CHECK(o.error().message.find(actors::channel_memory_env) != std::string::npos);
  }
  // TROUPE_CHANNEL_POOLED: "0" gives each connection a thread, "1" pools them, unset the
  // job's size decides; anything but 0 or 1 is named.
  {
    test::Env unset(actors::channel_pooled_env, nullptr);
    CHECK_FALSE(actors::ChannelServerOptions::from_env("").value().pooled.has_value());
  }
  for (const char* v : {"0", "1"}) {
    test::Env set(actors::channel_pooled_env, v);
    CHECK(actors::ChannelServerOptions::from_env("").value().pooled == (v[0] == '1'));
  }
  {
    test::Env set(actors::channel_pooled_env, "yes");
    auto o = actors::ChannelServerOptions::from_env("");
    REQUIRE_FALSE(o.ok());
    CHECK(o.error().message.find(actors::channel_pooled_env) != std::string::npos);
  }
}

TEST_CASE("A PS's tensor channel answers a request its shard holds past the bound with an error",
          "[net][channel][limits]") {
  // A shard that does not answer (stuck in slow disk I/O, say): the peer hears an error
  // naming the wait at the bound, rather than waiting on for as long as the shard does,
  // and that connection ends (the request may still be applied later).
  caf::actor_system_config cfg;
  caf::actor_system sys(troupe::net::add_wire_types(cfg));
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  auto stuck = sys.spawn<caf::detached>([released]() -> caf::behavior {
    return {[released](net::batch_atom, net::PsRequest&) {
      released.wait();
      return std::vector<net::PsItem>{};
    }};
  });
  actors::ChannelServerOptions o;
  o.answer_timeout = 100ms;
  auto server = actors::ChannelServer::start(sys, stuck, "127.0.0.1", o);
  REQUIRE(server.ok());
  auto member = net::connect_to("127.0.0.1", (*server)->port(), 10s);
  REQUIRE(member.ok());
  const net::PsRequest pull = pull_of("v#0");
  REQUIRE(net::send_request(*member, pull));
  REQUIRE(net::wait_readable(*member, 10s));
  auto reply = net::recv_reply(*member);
  REQUIRE_FALSE(reply.ok());
  CHECK(reply.error().code == core::Errc::unavailable);
  CHECK_THAT(reply.error().message, Catch::Contains("no answer within 100 ms"));
  REQUIRE(net::wait_readable(*member, 10s));
  CHECK(net::is_clean_close(net::recv_reply(*member).error()));
  release.set_value();
  (*server)->stop();
  caf::anon_send_exit(stuck, caf::exit_reason::user_shutdown);
}

// Hundreds of workers keep a connection to each PS task: the channel serves them request by
// request on a few threads (net::RequestPool), not on a thread per connection.
TEST_CASE("A PS's tensor channel serves many connections on a few threads", "[net][channel]") {
  ChannelFixture f;
  f.create("v", 4);
  actors::ChannelServerOptions o;
  o.pooled = true;  // as for a job of ChannelServerOptions::pooled_from members or more
  o.threads = 3;
  auto server = actors::ChannelServer::start(f.sys, f.ps, "127.0.0.1", o);
  REQUIRE(server.ok());
  std::vector<net::Socket> members;
  for (int i = 0; i < 48; ++i) {
    auto m = net::connect_to("127.0.0.1", (*server)->port(), 10s);
    REQUIRE(m.ok());
    members.push_back(std::move(*m));
  }
  // Each asks in turn, twice over: one request in flight at a time needs no fourth thread.
  for (int round = 0; round < 2; ++round)
    for (auto& m : members) {
      REQUIRE(net::send_request(m, pull_of("v#0")));
      auto reply = net::recv_reply(m);
      REQUIRE(reply.ok());
      REQUIRE(reply->size() == 1);
      CHECK((*reply)[0].tensor.data == std::vector<float>(4, 2.0f));
    }
  CHECK((*server)->connections() == 48);
  CHECK((*server)->serving_threads() == 3);
  {  // not pooled (TROUPE_CHANNEL_POOLED=0): a thread per connection, as before
    actors::ChannelServerOptions threaded = o;
    threaded.pooled = false;
    auto other = actors::ChannelServer::start(f.sys, f.ps, "127.0.0.1", threaded);
    REQUIRE(other.ok());
    std::vector<net::Socket> each;
    for (int i = 0; i < 8; ++i) {
      auto m = net::connect_to("127.0.0.1", (*other)->port(), 10s);
      REQUIRE(m.ok());
      REQUIRE(net::send_request(*m, pull_of("v#0")));
      REQUIRE(net::recv_reply(*m).ok());
      each.push_back(std::move(*m));
    }
    CHECK((*other)->serving_threads() == 8);
    (*other)->stop();
  }
  // A member that hangs up is gone from the pool.
  members.pop_back();
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while ((*server)->connections() != 47 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::yield();
  CHECK((*server)->connections() == 47);
  (*server)->stop();
}

// A slow member holds one thread for at most its stall timeout; the others' requests get
// more threads meanwhile instead of waiting behind it.
TEST_CASE("A PS's tensor channel serves members while slow ones hold its threads",
          "[net][channel][limits]") {
  ChannelFixture f;
  f.create("v", 4);
  actors::ChannelServerOptions o;
  o.pooled = true;
  o.threads = 2;
  o.stall_timeout = 60s;  // far past this test's waits: only more threads answer in time
  auto server = actors::ChannelServer::start(f.sys, f.ps, "127.0.0.1", o);
  REQUIRE(server.ok());
  const std::string frame = frame_bytes(pull_of("v#0"));
  std::vector<net::Socket> slow;
  for (int i = 0; i < 3; ++i) {  // more slow members than threads
    auto s = net::connect_to("127.0.0.1", (*server)->port(), 10s);
    REQUIRE(s.ok());
    REQUIRE(::send(s->fd(), frame.data(), 8, MSG_NOSIGNAL) == 8);  // a frame begun, not ended
    slow.push_back(std::move(*s));
  }
  auto member = net::connect_to("127.0.0.1", (*server)->port(), 10s);
  REQUIRE(member.ok());
  REQUIRE(net::send_request(*member, pull_of("v#0")));
  REQUIRE(net::wait_readable(*member, 20s));
  auto reply = net::recv_reply(*member);
  REQUIRE(reply.ok());
  CHECK((*reply)[0].tensor.data == std::vector<float>(4, 2.0f));
  CHECK((*server)->serving_threads() >= 4);  // the slow ones' three, and the member's
  // The slow members finish their frames and are answered too.
  for (auto& s : slow) {
    REQUIRE(::send(s.fd(), frame.data() + 8, frame.size() - 8, MSG_NOSIGNAL) ==
            static_cast<ssize_t>(frame.size() - 8));
    CHECK(net::recv_reply(s).ok());
  }
  (*server)->stop();
}

// Pooled, a member's first turn is its TLS handshake; its requests follow on the pool's
// threads, TLS bytes already decrypted served at once (poll cannot see them).
TEST_CASE("Over TLS a pooled tensor channel serves members", "[net][channel][tls]") {
  ChannelFixture f;
  f.create("v", 4);
  const std::string secret = "the job's secret, 32 bytes long!";
  net::set_links_encrypted(true);
  actors::ChannelServerOptions o;
  o.pooled = true;
  o.secret = secret;
  auto server = actors::ChannelServer::start(f.sys, f.ps, "127.0.0.1", o);
  REQUIRE(server.ok());
  std::vector<net::Socket> members;
  for (int i = 0; i < 3; ++i) {
    auto m = net::connect_to("127.0.0.1", (*server)->port(), 10s);
    REQUIRE(m.ok());
    REQUIRE(net::authenticate_to(*m, secret, 10s, /*tls=*/true).ok());
    REQUIRE(m->tls() != nullptr);
    members.push_back(std::move(*m));
  }
  for (int round = 0; round < 3; ++round)
    for (auto& m : members) {
      REQUIRE(net::send_request(m, pull_of("v#0")));
      auto reply = net::recv_reply(m);
      REQUIRE(reply.ok());
      CHECK((*reply)[0].tensor.data == std::vector<float>(4, 2.0f));
    }
  // Two requests written back to back: the second may sit decrypted in TLS's buffer.
  REQUIRE(net::send_request(members[0], pull_of("v#0")));
  REQUIRE(net::send_request(members[0], pull_of("v#0")));
  CHECK(net::recv_reply(members[0]).ok());
  CHECK(net::recv_reply(members[0]).ok());
  (*server)->stop();
  net::set_links_encrypted(false);
}
