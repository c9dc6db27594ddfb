// The gate in front of CAF's port: only a peer that proves the job's secret reaches CAF,
// every BASP frame it sends is checked before CAF would allocate it, and strangers are
// refused and counted while members go on being served. In-process here (two actor
// systems); test_ps_process.cpp does the same against a `troupe serve` PS process.
#include <catch2/catch.hpp>

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "helpers.hpp"
#include "net/auth.hpp"
#include "net/caf_door.hpp"
#include "net/channel.hpp"
#include "net/connect.hpp"
#include "net/gate.hpp"
#include "net/node.hpp"
#include "net/socket.hpp"
#include "process.hpp"

using namespace troupe;
using namespace std::chrono_literals;

namespace {

using troupe::test::secret;

// A 32-byte BASP header: operation, padding, flags, then the payload length (big-endian).
std::array<unsigned char, 32> basp_header(unsigned char operation, uint32_t payload) {
  std::array<unsigned char, 32> h{};
  h[0] = operation;
  h[4] = static_cast<unsigned char>(payload >> 24);
  h[5] = static_cast<unsigned char>(payload >> 16);
  h[6] = static_cast<unsigned char>(payload >> 8);
  h[7] = static_cast<unsigned char>(payload);
  return h;
}

// True once the peer has closed `s` (read returns 0 or an error), within `timeout`.
bool closed_by_peer(const net::Socket& s, std::chrono::milliseconds timeout) {
  timeval tv{static_cast<time_t>(timeout.count() / 1000),
             static_cast<suseconds_t>((timeout.count() % 1000) * 1000)};
  ::setsockopt(s.fd(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  char buf[256];
  for (;;) {
    const ssize_t r = ::recv(s.fd(), buf, sizeof buf, 0);
    if (r == 0) return true;
    if (r < 0) return errno != EAGAIN && errno != EWOULDBLOCK;
  }
}

// CAF listening nowhere, serving `behavior` through a door, and a gate taking the address
// peers dial.
struct GatedActor {
  caf::actor_system_config cfg;
  caf::actor_system sys{(net::configure(cfg), cfg)};
  caf::actor actor;
  net::CafDoor door{sys, 1};
  std::mutex mu;  // before the gate: its callback reaches them until it stops
  std::condition_variable refusal;
  uint64_t refusals = 0;
  std::unique_ptr<net::CafGate> gate;
  explicit GatedActor(std::function<caf::behavior()> behavior) {
    actor = sys.spawn(std::move(behavior));
    door.serve(actor);
    auto opened = net::CafGate::open(
        "127.0.0.1", 0, [this] { return door.connect(); }, secret, {},
        [this] {
          std::lock_guard<std::mutex> lock(mu);
          ++refusals;
          refusal.notify_all();
        });
    REQUIRE(opened.ok());
    gate = std::move(*opened);
  }
  ~GatedActor() {
    gate->stop();
    caf::anon_send_exit(actor, caf::exit_reason::user_shutdown);
  }
  uint16_t port() const { return gate->port(); }
  // Waits (at most 10 s) until the gate has reported `n` refusals; how many it counts.
  uint64_t refused_at_least(uint64_t n) {
    std::unique_lock<std::mutex> lock(mu);
    refusal.wait_for(lock, 10s, [&] { return refusals >= n; });
    return gate->refused();
  }
};

// An actor system of a member, and `remote` reached through a tunnel to `gate_port`.
struct Member {
  caf::actor_system_config cfg;
  caf::actor_system sys{(net::configure(cfg), cfg)};
  caf::scoped_actor self{sys};
  caf::actor remote;
  explicit Member(uint16_t gate_port) {
    auto tunnel = net::tunnel_to("127.0.0.1", gate_port, secret);
    REQUIRE(tunnel.ok());
    auto found = net::connect_with_retry(sys, "127.0.0.1:" + std::to_string(*tunnel), "ps:0", 30s);
    REQUIRE(found);
    remote = found.value();
  }
};

}  // namespace

TEST_CASE("BaspFrameCheck follows frames across reads and refuses oversized headers",
          "[net][gate]") {
  net::BaspFrameCheck check(1000);
  // Two frames, the first with a payload, fed a byte at a time and then in one piece.
  std::vector<unsigned char> stream;
  auto h1 = basp_header(0x02, 5);
  stream.insert(stream.end(), h1.begin(), h1.end());
  stream.insert(stream.end(), {1, 2, 3, 4, 5});
  auto h2 = basp_header(0x06, 0);  // a heartbeat
  stream.insert(stream.end(), h2.begin(), h2.end());
  for (unsigned char b : stream)
    REQUIRE(check.feed(&b, 1).ok());
  REQUIRE(check.feed(stream.data(), stream.size()).ok());
  CHECK(check.frames() == 4);

  // A header announcing 4 GiB is refused when its last byte arrives: CAF never reads it.
  auto huge = basp_header(0x01, 0xffffffffu);
  auto st = check.feed(huge.data(), 31);
  REQUIRE(st.ok());
  st = check.feed(huge.data() + 31, 1);
  REQUIRE_FALSE(st.ok());
  CHECK(st.error().message.find("4294967295") != std::string::npos);
  // The limit itself passes; an operation BASP does not have does not.
  net::BaspFrameCheck at_limit(1000);
  auto edge = basp_header(0x02, 1000);
  CHECK(at_limit.feed(edge.data(), edge.size()).ok());
  net::BaspFrameCheck unknown(1000);
  auto bad = basp_header(0x07, 0);
  CHECK_FALSE(unknown.feed(bad.data(), bad.size()).ok());
}

TEST_CASE("A CAF gate admits members through tunnels and refuses strangers", "[net][gate]") {
  GatedActor echo([]() -> caf::behavior { return {[](int32_t x) { return x + 1; }}; });
  const uint16_t port = echo.port();
  // A member: its CAF dials its tunnel, which proves the secret to the gate.
  Member m(port);
  auto ask = [&] {
    int32_t got = 0;
    m.self->request(m.remote, 5s, int32_t{41})
        .receive([&](int32_t y) { got = y; }, [&](caf::error& e) { FAIL(m.sys.render(e)); });
    return got;
  };
  CHECK(ask() == 42);

  // Strangers: CAF straight at the gate (gets a challenge, not BASP), CAF through a tunnel
  // with the wrong secret, and raw bytes announcing a 4 GiB message.
  caf::actor_system_config stranger_cfg;
  net::configure(stranger_cfg);
  caf::actor_system stranger_sys{stranger_cfg};
  CHECK_FALSE(stranger_sys.middleman().remote_actor("127.0.0.1", port));
  auto wrong = net::tunnel_to("127.0.0.1", port, "not the job's secret, also 32 b.");
  REQUIRE(wrong.ok());
  CHECK_FALSE(stranger_sys.middleman().remote_actor("127.0.0.1", *wrong));
  auto huge = basp_header(0x01, 0xffffffffu);
  auto raw = net::connect_to("127.0.0.1", port, 5s);
  REQUIRE(raw.ok());
  REQUIRE(::send(raw->fd(), huge.data(), huge.size(), MSG_NOSIGNAL) == 32);
  CHECK(closed_by_peer(*raw, 5s));
  // A member announcing 4 GiB is cut off by the frame check before CAF reads the header.
  auto rogue = net::connect_to("127.0.0.1", port, 5s);
  REQUIRE(rogue.ok());
  REQUIRE(net::authenticate_to(*rogue, secret, 5s).ok());
  REQUIRE(::send(rogue->fd(), huge.data(), huge.size(), MSG_NOSIGNAL) == 32);
  CHECK(closed_by_peer(*rogue, 5s));

  CHECK(echo.refused_at_least(4) == 4);
  // The member is served as before.
  CHECK(ask() == 42);
}

// A member's CAF that dials ps:0 but finds another task there (two tasks given one
// address; a stale address after a move) is refused: the gate proves which task it is.
TEST_CASE("A CAF gate proves which task it is: a member dialling another task is refused",
          "[net][gate]") {
  caf::actor_system_config cfg;
  caf::actor_system sys{(net::configure(cfg), cfg)};
  auto actor = sys.spawn([]() -> caf::behavior { return {[](int32_t x) { return x + 1; }}; });
  net::CafDoor door(sys, 1);
  door.serve(actor);
  std::atomic<int> refused{0};
  auto gate = net::CafGate::open(
      "127.0.0.1", 0, [&] { return door.connect(); }, secret, {}, [&] { ++refused; }, "ps:0");
  REQUIRE(gate.ok());
  caf::actor_system_config member_cfg;
  caf::actor_system member{(net::configure(member_cfg), member_cfg)};
  auto meant_ps1 = net::tunnel_to("127.0.0.1", (*gate)->port(), secret, {}, "ps:1");
  REQUIRE(meant_ps1.ok());
  CHECK_FALSE(member.middleman().remote_actor("127.0.0.1", *meant_ps1));
  auto meant_ps0 = net::tunnel_to("127.0.0.1", (*gate)->port(), secret, {}, "ps:0");
  REQUIRE(meant_ps0.ok());
  CHECK(net::connect_with_retry(member, "127.0.0.1:" + std::to_string(*meant_ps0), "ps:0", 30s));
  CHECK(refused >= 1);
  (*gate)->forget_caf();
  (*gate)->stop();
  net::close_tunnels_to("127.0.0.1", (*gate)->port());
  caf::anon_send_exit(actor, caf::exit_reason::user_shutdown);
}

// Found from outside: a tunnel (the loopback port this process's CAF dials to reach a
// gate) proved the secret for whoever dialled it, so any local process reached a PS as a
// member. It now serves only connections whose other end is a socket of this process.
TEST_CASE("A tunnel carries this process's connections only", "[net][gate]") {
  GatedActor echo([]() -> caf::behavior { return {[](int32_t x) { return x + 1; }}; });
  auto tunnel = net::tunnel_to("127.0.0.1", echo.port(), secret);
  REQUIRE(tunnel.ok());
  // This process: through the tunnel to CAF, which greets with its BASP handshake.
  auto mine = net::connect_to("127.0.0.1", *tunnel, 5s);
  REQUIRE(mine.ok());
  net::set_io_timeout(*mine, 10s);
  char greeting[32];
  CHECK(::recv(mine->fd(), greeting, sizeof greeting, MSG_WAITALL) == 32);
  // Another process (another user's, when this is root) gets nothing: closed unrelayed.
  const auto stranger = test::read_as_another_user(*tunnel, 10s);
  CHECK(stranger.connected);
  CHECK(stranger.closed);
  CHECK(stranger.bytes.empty());
  // A member through it still works.
  Member m(echo.port());
  int32_t got = 0;
  m.self->request(m.remote, 5s, int32_t{1})
      .receive([&](int32_t y) { got = y; }, [&](caf::error& e) { FAIL(m.sys.render(e)); });
  CHECK(got == 2);
  net::close_tunnels_to("127.0.0.1", echo.port());
}

// A task that accepts TCP connections but never answers a handshake (a stopped process's
// kernel accepts them; a task too busy to be scheduled): a tunnel holds at most two
// handshakes in flight to it, closing further tries at once so CAF dials again later,
// and such a task never counts as reached; a gate that proves the secret does.
TEST_CASE("A tunnel holds two handshakes in flight and counts only a proven secret as reached",
          "[net][gate]") {
  uint16_t silent_port = 0;
  auto listener = net::listen_on("127.0.0.1", silent_port);
  REQUIRE(listener.ok());
  std::mutex mu;
  std::condition_variable changed;
  std::vector<net::Socket> held;  // accepted, never answered
  std::atomic<bool> stop{false};
  std::thread acceptor([&] {
    while (!stop) {
      pollfd p{listener->fd(), POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      std::string peer;
      auto s = net::accept_on(*listener, peer);
      if (!s) continue;
      std::lock_guard<std::mutex> lock(mu);
      held.push_back(std::move(*s));
      changed.notify_all();
    }
  });
  net::GateLimits limits;
  limits.handshake_timeout = 20s;  // held for the whole test, unless let go
  auto tunnel = net::tunnel_to("127.0.0.1", silent_port, secret, limits);
  REQUIRE(tunnel.ok());
  std::vector<net::Socket> tries;
  for (int i = 0; i < 4; ++i) {
    auto c = net::connect_to("127.0.0.1", *tunnel, 5s);
    REQUIRE(c.ok());
    tries.push_back(std::move(*c));
  }
  {  // two dialled through to the silent task...
    std::unique_lock<std::mutex> lock(mu);
    CHECK(changed.wait_for(lock, 10s, [&] { return held.size() >= 2; }));
  }
  // ... and the other two closed at once, while the two held stay open.
  auto closed_now = [](const net::Socket& t) {
    char b;
    const ssize_t r = ::recv(t.fd(), &b, 1, MSG_DONTWAIT | MSG_PEEK);
    return r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
  };
  auto count_closed = [&] { return std::count_if(tries.begin(), tries.end(), closed_now); };
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (count_closed() < 2 && std::chrono::steady_clock::now() < deadline) {
    std::vector<pollfd> fds;
    for (auto& t : tries)
      fds.push_back({t.fd(), POLLIN, 0});
    ::poll(fds.data(), fds.size(), 100);
  }
  CHECK(count_closed() == 2);
  {
    std::lock_guard<std::mutex> lock(mu);
    CHECK(held.size() == 2);
  }
  // Accepted, never proven: not reached.
  CHECK(net::tunnel_reached("127.0.0.1", silent_port) == std::chrono::steady_clock::time_point{});
  {
    std::lock_guard<std::mutex> lock(mu);
    held.clear();  // the held handshakes break now, and their tries close
  }
  stop = true;
  acceptor.join();
  net::close_tunnels_to("127.0.0.1", silent_port);

  GatedActor echo([]() -> caf::behavior { return {[](int32_t x) { return x + 1; }}; });
  const auto before = std::chrono::steady_clock::now();
  Member m(echo.port());  // its CAF's handshake through the tunnel proves the secret
  CHECK(net::tunnel_reached("127.0.0.1", echo.port()) >= before);
  net::close_tunnels_to("127.0.0.1", echo.port());
}

TEST_CASE("Over TLS a CAF gate carries members' messages and refuses plain peers",
          "[net][gate][tls]") {
  net::set_links_encrypted(true);
  // Counts the x's of what it is sent: a message of 1 MiB crosses the gate in many TLS
  // records.
  GatedActor counter([]() -> caf::behavior {
    return {[](const std::string& text) {
      return static_cast<int32_t>(std::count(text.begin(), text.end(), 'x'));
    }};
  });
  const uint16_t port = counter.port();
  Member m(port);
  std::string text(1 << 20, 'x');
  for (size_t i = 0; i < text.size(); i += 7)
    text[i] = 'o';
  const auto xs = static_cast<int32_t>(std::count(text.begin(), text.end(), 'x'));
  auto ask = [&] {
    int32_t got = 0;
    m.self->request(m.remote, 10s, text)
        .receive([&](int32_t n) { got = n; }, [&](caf::error& e) { FAIL(m.sys.render(e)); });
    return got;
  };
  for (int round = 0; round < 3; ++round)
    CHECK(ask() == xs);

  // A peer with the secret but without TLS is refused by name; the member goes on.
  auto plain = net::connect_to("127.0.0.1", port, 5s);
  REQUIRE(plain.ok());
  auto st = net::authenticate_to(*plain, secret, 5s, /*tls=*/false);
  REQUIRE_FALSE(st.ok());
  CHECK(st.error().message.find("TROUPE_TLS") != std::string::npos);
  CHECK(counter.refused_at_least(1) == 1);
  CHECK(ask() == xs);
  net::set_links_encrypted(false);
}

// Through a tunnel CAF sees every failure as a connection closed in its handshake: the
// error that gives the task up names why the tunnel closed it.
TEST_CASE("connect_with_retry through a tunnel names why the tunnel closed each try",
          "[net][gate]") {
  using namespace std::chrono_literals;
  test::Env env("TROUPE_CLUSTER_SECRET", "tunnel-failure-test-secret-0123456789");
  uint16_t port = 0;
  {
    auto taken = net::listen_on("127.0.0.1", port);  // a port nobody listens on once closed
    REQUIRE(taken);
  }
  caf::actor_system_config cfg;
  caf::actor_system sys{(net::configure(cfg), cfg)};
  const std::string address = "127.0.0.1:" + std::to_string(port);
  auto made = net::connect_with_retry(sys, address, "ps:7", 400ms);
  REQUIRE_FALSE(made);
  INFO(made.error().message);
  CHECK(made.error().message.find("ps:7 at " + address + " unreachable after") !=
        std::string::npos);
  CHECK(made.error().message.find("through the tunnel: connect to 127.0.0.1:" +
                                  std::to_string(port)) != std::string::npos);
  CHECK(made.error().message.find("refused") != std::string::npos);
  const auto f = net::tunnel_failure("127.0.0.1", port);
  CHECK(f.why.find("refused") != std::string::npos);
  CHECK(f.when > std::chrono::steady_clock::time_point{});
}

// A task that is up but too busy to finish a handshake shows a sign of life each attempt
// (its port accepts): with patience, connect_with_retry waits for it past `timeout`, up to
// the cap. A refused port (nobody listening) is no sign of life: it fails after `timeout`.
TEST_CASE("connect_with_retry waits for a listener that does not finish within its cap",
          "[net][gate]") {
  using namespace std::chrono_literals;
  using clock = std::chrono::steady_clock;
  uint16_t port = 0;
  auto listener = net::listen_on("127.0.0.1", port);
  REQUIRE(listener);
  std::atomic<bool> stop{false};
  std::atomic<int> accepted{0};
  std::thread busy([&] {  // accepts every connection and closes it before any handshake
    while (!stop) {
      pollfd p{listener->fd(), POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      std::string peer;
      if (auto s = net::accept_on(*listener, peer)) ++accepted;
    }
  });
  caf::actor_system_config cfg;
  caf::actor_system sys{(net::configure(cfg), cfg)};
  const std::string address = "127.0.0.1:" + std::to_string(port);

  auto t0 = clock::now();
  auto patient = net::connect_with_retry(sys, address, "ps:9", 300ms, {}, {300ms, 1500ms});
  const auto waited = clock::now() - t0;
  REQUIRE_FALSE(patient);
  INFO(patient.error().message);
  CHECK(patient.error().code == core::Errc::unavailable);
  CHECK(waited >= 1500ms);  // every attempt reached the listener: waited up to the cap
  CHECK(accepted >= 2);
  CHECK(patient.error().message.find("ps:9 at " + address + " unreachable after") !=
        std::string::npos);

  // Without patience the same listener gets `timeout` from the start, as before.
  t0 = clock::now();
  auto plain = net::connect_with_retry(sys, address, "ps:9", 300ms);
  REQUIRE_FALSE(plain);
  CHECK(clock::now() - t0 < 1500ms);

  stop = true;
  busy.join();
  listener->close();  // the port refuses now
  t0 = clock::now();
  auto refused = net::connect_with_retry(sys, address, "ps:9", 300ms, {}, {300ms, 5000ms});
  REQUIRE_FALSE(refused);
  INFO(refused.error().message);
  CHECK(clock::now() - t0 < 5000ms);  // no sign of life: the cap is never reached
}

// CAF 0.17.6 gives a connection it dials only until its next heartbeat tick (100 ms here)
// to be answered. connect_with_retry waits for the peer's handshake itself: a peer that
// answers after 400 ms, slower than a tick, is reached on the first connection; a peer
// whose kernel accepts but which never answers is an error that says so.
TEST_CASE("connect_with_retry reaches a peer slower to answer than a heartbeat interval",
          "[net][gate]") {
  using namespace std::chrono_literals;
  caf::actor_system_config server_cfg;
  caf::actor_system server{(net::configure(server_cfg), server_cfg)};
  auto echo = server.spawn([]() -> caf::behavior { return {[](int32_t x) { return x + 1; }}; });
  auto caf_port = server.middleman().publish(echo, 0, "127.0.0.1");
  REQUIRE(caf_port);

  // In front of it, a relay that holds each connection 400 ms before it dials CAF.
  uint16_t port = 0;
  auto listener = net::listen_on("127.0.0.1", port);
  REQUIRE(listener);
  std::atomic<bool> stop{false};
  std::atomic<int> accepted{0};
  std::thread slow([&] {
    while (!stop) {
      pollfd p{listener->fd(), POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      std::string peer;
      auto inside = net::accept_on(*listener, peer);
      if (!inside) continue;
      ++accepted;
      std::this_thread::sleep_for(400ms);  // the slow peer itself, not a wait for a condition
      auto outside = net::connect_to("127.0.0.1", *caf_port, 0ms);
      if (!outside) continue;
      net::BaspFrameCheck check(1u << 20);
      (void)net::relay(*outside, *inside, check);
    }
  });
  {
    caf::actor_system_config cfg;
    caf::actor_system sys{(net::configure(cfg), cfg)};
    const std::string address = "127.0.0.1:" + std::to_string(port);
    auto reached = net::connect_with_retry(sys, address, "ps:3", 3000ms);
    INFO((reached ? std::string("reached") : reached.error().message));
    REQUIRE(reached);
    CHECK(accepted == 1);  // the first connection waited: no redial
    caf::scoped_actor self{sys};
    int32_t answer = 0;
    self->request(*reached, 5s, int32_t{41})
        .receive([&](int32_t x) { answer = x; }, [](caf::error&) {});
    CHECK(answer == 42);
    stop = true;
  }  // the client's system ends: its connection closes, and so does the relay
  slow.join();

  // A listener that accepts and never answers: the tries wait out the deadline.
  uint16_t mute_port = 0;
  auto mute = net::listen_on("127.0.0.1", mute_port);
  REQUIRE(mute);
  caf::actor_system_config cfg;
  caf::actor_system sys{(net::configure(cfg), cfg)};
  const auto t0 = std::chrono::steady_clock::now();
  auto silent =
      net::connect_with_retry(sys, "127.0.0.1:" + std::to_string(mute_port), "ps:4", 600ms);
  REQUIRE_FALSE(silent);
  INFO(silent.error().message);
  CHECK(std::chrono::steady_clock::now() - t0 >= 600ms);
  CHECK(silent.error().message.find("no handshake came within") != std::string::npos);
  caf::anon_send_exit(echo, caf::exit_reason::user_shutdown);
}
