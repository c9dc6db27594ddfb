// TLS on the job's links (net/tls.hpp): what crosses the wire is ciphertext, a changed
// byte ends the link instead of reaching the reader, both ends must agree on TLS and say so
// by name when they do not, and a peer that stalls the TLS handshake is given up on.
// A man in the middle (Tap) sits between the two ends and sees every byte.
#include <catch2/catch.hpp>

#include <poll.h>
#include <sys/socket.h>

#include <cstdlib>
#include <future>
#include <thread>

#include "core/sha256.hpp"
#include "net/auth.hpp"
#include "net/channel.hpp"
#include "net/tls.hpp"
#include "process.hpp"
#include "socket_pair.hpp"

using namespace troupe;
using namespace std::chrono_literals;

namespace {

using troupe::test::secret;

// Forwards bytes between `client` and `server` on a thread, keeping what the client sent
// and, at offset `flip_at` of that stream (if any), changing one bit.
class Tap {
 public:
  explicit Tap(long flip_at = -1) : flip_at_(flip_at) {
    thread_ = std::thread([this] { run(); });
  }
  ~Tap() { finish(); }
  net::Socket& client() { return to_client_.b; }
  net::Socket& server() { return to_server_.b; }
  // Ends the forwarding; what the client sent is complete afterwards.
  const std::string& finish() {
    if (thread_.joinable()) {
      to_client_.a.shutdown();
      to_server_.a.shutdown();
      thread_.join();
    }
    return seen_;
  }

 private:
  void run() {
    char buf[65536];
    for (;;) {
      pollfd p[2] = {{to_client_.a.fd(), POLLIN, 0}, {to_server_.a.fd(), POLLIN, 0}};
      if (::poll(p, 2, 20000) <= 0) return;
      for (int i = 0; i < 2; ++i) {
        if (p[i].revents == 0) continue;
        const ssize_t n = ::recv(p[i].fd, buf, sizeof buf, 0);
        if (n <= 0) return;
        if (i == 0) {
          const auto at = static_cast<long>(seen_.size());
          if (flip_at_ >= at && flip_at_ < at + n) buf[flip_at_ - at] ^= 0x10;
          seen_.append(buf, static_cast<size_t>(n));
        }
        const int to = i == 0 ? to_server_.a.fd() : to_client_.a.fd();
        for (ssize_t sent = 0; sent < n;) {
          const ssize_t w = ::send(to, buf + sent, static_cast<size_t>(n - sent), MSG_NOSIGNAL);
          if (w <= 0) return;
          sent += w;
        }
      }
    }
  }

  test::SocketPair to_client_, to_server_;  // .a: the tap's ends; .b: the client's, the server's
  long flip_at_;
  std::string seen_;
  std::thread thread_;
};

net::PsRequest push() {
  net::PsRequest r;
  r.op = static_cast<uint8_t>(net::PsOp::push);
  r.tag = 7;
  net::PsItem item;
  item.name = "embedding#0";
  item.tensor.dims = {8192};
  for (int i = 0; i < 8192; ++i)
    item.tensor.data.push_back(1000.0f + 0.25f * static_cast<float>(i));
  r.items.push_back(std::move(item));
  return r;
}

// 64 bytes of the tensor as they lie in memory (and in a plain frame).
std::string tensor_bytes(const net::PsRequest& r) {
  const float* f = r.items[0].tensor.data.data() + 100;
  return std::string(reinterpret_cast<const char*>(f), 64);
}

struct TlsOutcome {
  core::Expected<net::PsRequest> got = core::make_error(core::Errc::internal, "not run");
  std::string wire;  // what the client sent, as the tap saw it
};

// The client proves the secret and pushes; the server admits it and reads the request.
TlsOutcome push_through(Tap& tap, bool tls) {
  auto server = std::async(std::launch::async, [&]() -> core::Expected<net::PsRequest> {
    if (auto st = net::authenticate_peer(tap.server(), secret, 5s, tls); !st) return st.error();
    return net::recv_request(tap.server());
  });
  REQUIRE(net::authenticate_to(tap.client(), secret, 5s, tls).ok());
  CHECK((tap.client().tls() != nullptr) == tls);
  (void)net::send_request(tap.client(), push());  // the tap may have spoilt it on the way
  TlsOutcome out;
  out.got = server.get();
  out.wire = tap.finish();
  return out;
}

}  // namespace

TEST_CASE("Over TLS the channel carries a push whole, and the wire shows none of it",
          "[net][tls]") {
  const net::PsRequest sent = push();
  Tap plain_tap;
  const TlsOutcome plain = push_through(plain_tap, false);
  REQUIRE(plain.got.ok());
  // Without TLS the tensor and the frame's magic are there for anyone on the path to read.
  CHECK(plain.wire.find(tensor_bytes(sent)) != std::string::npos);
  CHECK(plain.wire.find("TRC3") != std::string::npos);

  Tap tls_tap;
  const TlsOutcome tls = push_through(tls_tap, true);
  REQUIRE(tls.got.ok());
  CHECK(tls.got->tag == 7);
  REQUIRE(tls.got->items.size() == 1);
  CHECK(tls.got->items[0].name == "embedding#0");
  CHECK(tls.got->items[0].tensor.data == sent.items[0].tensor.data);
  CHECK(tls.wire.find(tensor_bytes(sent)) == std::string::npos);
  CHECK(tls.wire.find("TRC3") == std::string::npos);
  CHECK(tls.wire.find("embedding#0") == std::string::npos);
  CHECK(tls.wire.size() > sent.items[0].tensor.data.size() * sizeof(float));
}

TEST_CASE("Over TLS a changed byte ends the link, and the reader never gets the bytes",
          "[net][tls]") {
  // Measure the stream once, then change one bit in the middle of the tensor's records.
  Tap measure;
  const auto whole = push_through(measure, true).wire.size();
  REQUIRE(whole > 32768);
  Tap tamper(static_cast<long>(whole) - 16000);
  const TlsOutcome spoilt = push_through(tamper, true);
  REQUIRE_FALSE(spoilt.got.ok());
  CHECK(spoilt.got.error().code == core::Errc::data_loss);
  CHECK(spoilt.got.error().message.find("integrity") != std::string::npos);

  // The same change without TLS goes unnoticed: the reader takes a wrong float.
  Tap plain_measure;
  const auto plain_whole = push_through(plain_measure, false).wire.size();
  Tap plain_tamper(static_cast<long>(plain_whole) - 16000);
  const TlsOutcome unnoticed = push_through(plain_tamper, false);
  REQUIRE(unnoticed.got.ok());
  CHECK(unnoticed.got->items[0].tensor.data != push().items[0].tensor.data);
}

TEST_CASE("Ends that disagree on TLS are refused, each naming TROUPE_TLS", "[net][tls]") {
  for (const bool server_tls : {true, false}) {
    CAPTURE(server_tls);
    test::SocketPair p;
    auto server = std::async(std::launch::async, [&] {
      auto st = net::authenticate_peer(p.a, secret, 2s, server_tls);
      if (!st) p.a.shutdown();
      return st;
    });
    const auto client = net::authenticate_to(p.b, secret, 2s, !server_tls);
    const auto served = server.get();
    REQUIRE_FALSE(client.ok());
    REQUIRE_FALSE(served.ok());
    CHECK(client.error().code == core::Errc::permission_denied);
    CHECK(served.error().code == core::Errc::permission_denied);
    CHECK(client.error().message.find("TROUPE_TLS") != std::string::npos);
    CHECK(served.error().message.find("TROUPE_TLS") != std::string::npos);
    CHECK(client.error().message.find(server_tls
                                          ? "the server encrypts"
                                          : "the server does not encrypt") != std::string::npos);
  }
  // Both on TLS but with different secrets: refused before TLS begins.
  test::SocketPair p;
  auto server = std::async(std::launch::async, [&] {
    auto st = net::authenticate_peer(p.a, secret, 2s, true);
    if (!st) p.a.shutdown();
    return st;
  });
  CHECK_FALSE(net::authenticate_to(p.b, "another job's secret, 32 bytes!", 2s, true).ok());
  const auto refused = server.get();
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().message.find("no proof of the cluster secret") != std::string::npos);
  CHECK(p.a.tls() == nullptr);
}

TEST_CASE("A peer that proves the secret and then stalls the TLS handshake is given up on",
          "[net][tls]") {
  test::SocketPair p;
  auto server = std::async(std::launch::async,
                           [&] { return net::authenticate_peer(p.a, secret, 300ms, true); });
  // The client's half of Troupe's handshake by hand, then not one byte of TLS.
  char challenge[36];
  size_t got = 0;
  while (got < sizeof challenge) {
    const ssize_t n = ::recv(p.b.fd(), challenge + got, sizeof challenge - got, 0);
    REQUIRE(n > 0);
    got += static_cast<size_t>(n);
  }
  REQUIRE(std::string(challenge, 4) == "TRS1");
  const std::string nonce_s(challenge + 4, 32), nonce_c(32, 'c');
  const auto proof = core::hmac_sha256(secret, "troupe client" + nonce_s + nonce_c);
  const std::string hello =
      "TRS1" + nonce_c + std::string(reinterpret_cast<const char*>(proof.data()), proof.size());
  REQUIRE(::send(p.b.fd(), hello.data(), hello.size(), MSG_NOSIGNAL) ==
          static_cast<ssize_t>(hello.size()));
  const auto t0 = std::chrono::steady_clock::now();
  REQUIRE(server.wait_for(10s) == std::future_status::ready);
  const auto st = server.get();
  REQUIRE_FALSE(st.ok());
  // Within what was left of the handshake's 300 ms once Troupe's part was done.
  CHECK(st.error().message.find("no TLS handshake within ") != std::string::npos);
  CHECK(std::chrono::steady_clock::now() - t0 < 10s);
}

TEST_CASE("TROUPE_TLS is read with the cluster secret, bad values named", "[net][tls]") {
  ::unsetenv(net::cluster_secret_file_env);
  ::setenv(net::cluster_secret_env, secret.c_str(), 1);
  ::setenv(net::tls_env, "1", 1);
  CHECK(net::cluster_secret_from_env().value() == secret);
  CHECK(net::tls_from_env(true).value());
  ::setenv(net::tls_env, "yes please", 1);
  auto bad = net::cluster_secret_from_env();
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().message.find("TROUPE_TLS='yes please'") != std::string::npos);
  ::setenv(net::tls_env, "on", 1);
  ::unsetenv(net::cluster_secret_env);
  auto no_secret = net::cluster_secret_from_env();
  REQUIRE_FALSE(no_secret.ok());
  CHECK(no_secret.error().message.find("needs a cluster secret") != std::string::npos);
  ::setenv(net::tls_env, "off", 1);
  CHECK(net::cluster_secret_from_env().value().empty());
  ::unsetenv(net::tls_env);
}
