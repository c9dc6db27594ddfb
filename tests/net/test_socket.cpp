// Troupe's own links take what TF_CONFIG may hold: names of this machine, numeric IPv4
// and IPv6 addresses; a task whose name is not one of this machine's addresses (a
// Kubernetes service name) listens on the wildcard, or where TROUPE_BIND_ADDRESS says.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <future>

#include "net/channel.hpp"
#include "net/cluster_spec.hpp"
#include "net/socket.hpp"

using namespace troupe;
using namespace std::chrono_literals;

namespace {

// Listens on `host`, connects to `dial`, sends a byte each way; the peer text accept saw.
std::string round_trip(const std::string& host, const std::string& dial) {
  uint16_t port = 0;
  auto listener = net::listen_on(host, port);
  REQUIRE(listener.ok());
  REQUIRE(port != 0);
  auto server = std::async(std::launch::async, [&] {
    std::string peer;
    auto s = net::accept_on(*listener, peer);
    REQUIRE(s.ok());
    char c = 0;
    REQUIRE(::recv(s->fd(), &c, 1, 0) == 1);
    c = static_cast<char>(c + 1);
    REQUIRE(::send(s->fd(), &c, 1, MSG_NOSIGNAL) == 1);
    return peer;
  });
  auto client = net::connect_to(dial, port, 5s);
  REQUIRE(client.ok());
  char c = 41;
  REQUIRE(::send(client->fd(), &c, 1, MSG_NOSIGNAL) == 1);
  REQUIRE(::recv(client->fd(), &c, 1, 0) == 1);
  CHECK(c == 42);
  return server.get();
}

}  // namespace

TEST_CASE("links listen and connect by IPv4, IPv6 and host name", "[net][socket]") {
  CHECK(round_trip("127.0.0.1", "127.0.0.1").rfind("127.0.0.1:", 0) == 0);
  CHECK(round_trip("localhost", "localhost").find(':') != std::string::npos);
  CHECK(round_trip("::1", "::1").rfind("[::1]:", 0) == 0);
  // The wildcard takes both families.
  CHECK(round_trip("::", "127.0.0.1").find("127.0.0.1:") != std::string::npos);
  CHECK(round_trip("::", "::1").rfind("[::1]:", 0) == 0);
  // As TF_CONFIG writes them.
  auto hp = net::parse_host_port("[::1]:2222");
  REQUIRE(hp.ok());
  CHECK(hp->host == "::1");
  CHECK(net::host_port_text(hp->host, hp->port) == "[::1]:2222");
  CHECK(net::host_port_text("worker-0.job.svc", 2222) == "worker-0.job.svc:2222");
}

TEST_CASE("a task's links bind its address, the wildcard when it is not ours, or the override",
          "[net][socket]") {
  ::unsetenv(net::bind_address_env);
  CHECK(net::bind_host("127.0.0.1") == "127.0.0.1");
  CHECK(net::bind_host("localhost") == "localhost");
  // 192.0.2.1 (TEST-NET-1, documentation only) is no address of this machine: trying to
  // bind it sends nothing anywhere.
  const auto fallback = net::bind_host("192.0.2.1");
  CHECK((fallback == "::" || fallback == "0.0.0.0"));
  uint16_t port = 0;
  CHECK_FALSE(net::listen_on("192.0.2.1", port).ok());
  ::setenv(net::bind_address_env, "127.0.0.1", 1);
  CHECK(net::bind_host("192.0.2.1") == "127.0.0.1");
  CHECK(net::bind_host("::1") == "127.0.0.1");
  ::unsetenv(net::bind_address_env);
}

namespace {

// The next connection on `listener`, waiting at most 10 s for it.
net::Socket accept_within_10s(const net::Socket& listener) {
  pollfd p{listener.fd(), POLLIN, 0};
  REQUIRE(::poll(&p, 1, 10000) == 1);
  std::string peer;
  auto s = net::accept_on(listener, peer);
  REQUIRE(s.ok());
  return std::move(*s);
}

}  // namespace

TEST_CASE(
    "peer_is_this_process: this process's connection passes, one its owner closed before the "
    "check is dropped as gone, another process's is refused",
    "[net][socket]") {
  uint16_t port = 0;
  auto listener = net::listen_on("127.0.0.1", port);
  REQUIRE(listener.ok());

  // Ours, still open.
  auto mine = net::connect_to("127.0.0.1", port, 5s);
  REQUIRE(mine.ok());
  auto accepted = accept_within_10s(*listener);
  CHECK(net::peer_is_this_process(accepted).ok());

  // Ours, closed while it waited to be accepted (what a loaded process's CAF does to a
  // connection it gave up on): not another process's, just gone.
  auto given_up = net::connect_to("127.0.0.1", port, 5s);
  REQUIRE(given_up.ok());
  *given_up = net::Socket();  // closed
  auto late = accept_within_10s(*listener);
  auto gone = net::peer_is_this_process(late);
  REQUIRE_FALSE(gone.ok());
  CHECK(gone.error().code == core::Errc::cancelled);
  CHECK_THAT(gone.error().message, Catch::Contains("closed by its owner"));

  // Another process's, open: refused by name.
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {  // only async-signal-safe calls here
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(port);
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) != 0) ::_exit(1);
    for (;;)
      ::pause();  // holds the connection open until killed
  }
  auto theirs = accept_within_10s(*listener);
  auto refused = net::peer_is_this_process(theirs);
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().code == core::Errc::permission_denied);
  CHECK_THAT(refused.error().message, Catch::Contains("another process's connection"));
}
