// ConnectionServer: the listener with a thread per connection under the tensor channel and
// the CAF gate. Here its two ways to end: stop() cuts every connection at once, drain()
// stops accepting and lets open connections finish (what a task shutting down relies on
// to get its acknowledgement out through its gate).
#include <catch2/catch.hpp>

#include <sys/socket.h>

#include <atomic>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>

#include "net/connection_server.hpp"
#include "net/socket.hpp"

using namespace troupe;
using namespace std::chrono_literals;

namespace {

constexpr size_t reply_bytes = 4 << 20;  // more than the socket buffers hold

// A server whose handler signals that it runs, waits for one byte from its peer, then
// writes `reply_bytes` and returns.
struct ReplyingServer {
  std::mutex mu;
  std::condition_variable cv;
  int running = 0;
  std::unique_ptr<net::ConnectionServer> server;
  uint16_t port = 0;

  ReplyingServer() {
    auto listener = net::listen_on("127.0.0.1", port);
    REQUIRE(listener);
    auto s = net::ConnectionServer::start(std::move(*listener), port,
                                          [this](net::Socket& sock, const std::string&) {
                                            {
                                              std::lock_guard<std::mutex> lock(mu);
                                              ++running;
                                            }
                                            cv.notify_all();
                                            char go = 0;
                                            if (::recv(sock.fd(), &go, 1, 0) != 1) return;
                                            std::vector<char> reply(reply_bytes, 'r');
                                            size_t sent = 0;
                                            while (sent < reply.size()) {
                                              const ssize_t w =
                                                  ::send(sock.fd(), reply.data() + sent,
                                                         reply.size() - sent, MSG_NOSIGNAL);
                                              if (w <= 0) return;
                                              sent += static_cast<size_t>(w);
                                            }
                                          },
                                          {});
    REQUIRE(s);
    server = std::move(*s);
  }

  bool wait_running(int n) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, 10s, [&] { return running >= n; });
  }
};

// Reads until the peer closes (or 10 s pass); returns the bytes read.
size_t read_to_end(const net::Socket& s) {
  net::set_io_timeout(s, 10s);
  std::vector<char> buf(64 << 10);
  size_t total = 0;
  for (;;) {
    const ssize_t r = ::recv(s.fd(), buf.data(), buf.size(), 0);
    if (r <= 0) return total;
    total += static_cast<size_t>(r);
  }
}

// True once dialling `port` is refused, within 10 s.
bool refused_within(uint16_t port) {
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (std::chrono::steady_clock::now() < deadline) {
    auto c = net::connect_to("127.0.0.1", port, 1s);
    if (!c) return true;
    std::this_thread::yield();
  }
  return false;
}

}  // namespace

TEST_CASE("ConnectionServer drain lets open connections finish and refuses new ones",
          "[net][connection_server]") {
  ReplyingServer rs;
  auto client = net::connect_to("127.0.0.1", rs.port, 10s);
  REQUIRE(client);
  REQUIRE(rs.wait_running(1));
  auto drained = std::async(std::launch::async, [&] { rs.server->drain(30s); });
  // Draining: the listener is closed, the open connection goes on.
  REQUIRE(refused_within(rs.port));
  const char go = 1;
  REQUIRE(::send(client->fd(), &go, 1, MSG_NOSIGNAL) == 1);
  CHECK(read_to_end(*client) == reply_bytes);
  drained.get();  // returns once the handler did, long before 30 s
}

TEST_CASE("ConnectionServer drain ends a connection that outlasts it, and stop cuts at once",
          "[net][connection_server]") {
  ReplyingServer rs;
  auto first = net::connect_to("127.0.0.1", rs.port, 10s);
  auto second = net::connect_to("127.0.0.1", rs.port, 10s);
  REQUIRE(first);
  REQUIRE(second);
  REQUIRE(rs.wait_running(2));
  SECTION("drain") {
    // Neither peer sends its byte: drain waits out its bound, then shuts both down.
    rs.server->drain(100ms);
  }
  SECTION("stop") {
    rs.server->stop();
  }
  CHECK(read_to_end(*first) == 0);
  CHECK(read_to_end(*second) == 0);
  // Ending again does nothing.
  rs.server->drain(100ms);
  rs.server->stop();
}
