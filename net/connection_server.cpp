#include "net/connection_server.hpp"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace troupe::net {

core::Expected<std::unique_ptr<ConnectionServer>> ConnectionServer::start(
    Socket listener, uint16_t port, Handler handler, Refused refused, size_t max_connections) {
  std::unique_ptr<ConnectionServer> server(new ConnectionServer(
      std::move(listener), port, std::move(handler), std::move(refused), max_connections));
  if (::pipe2(server->wake_, O_CLOEXEC) != 0)
    return core::make_error(core::Errc::io_error,
                            "listener on port " + std::to_string(port) + ": cannot create a pipe");
  server->acceptor_ = std::thread([s = server.get()] { s->accept_loop(); });
  return server;
}

ConnectionServer::ConnectionServer(Socket listener, uint16_t port, Handler handler, Refused refused,
                                   size_t max_connections)
    : listener_(std::move(listener)),
      port_(port),
      handler_(std::move(handler)),
      refused_(std::move(refused)),
      max_connections_(std::max<size_t>(1, max_connections)) {}

ConnectionServer::~ConnectionServer() {
  stop();
  for (int fd : wake_)
    if (fd >= 0) ::close(fd);
}

void ConnectionServer::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) return;
    stopped_ = true;
    for (auto& c : connections_)
      c.socket.shutdown();
  }
  stop_accepting();
  // No new connection can appear now: join every one.
  for (auto& c : connections_)
    if (c.thread.joinable()) c.thread.join();
}

void ConnectionServer::stop_accepting() {
  if (wake_[1] >= 0) {
    const char byte = 1;
    [[maybe_unused]] ssize_t w = ::write(wake_[1], &byte, 1);
  }
  if (acceptor_.joinable()) acceptor_.join();
}

void ConnectionServer::drain(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) return;
  }
  stop_accepting();
  listener_.close();  // a peer dialling now is refused, not left in the backlog
  {
    std::unique_lock<std::mutex> lock(mu_);
    ended_.wait_until(lock, deadline, [this] {
      return std::all_of(connections_.begin(), connections_.end(),
                         [](const Connection& c) { return c.finished.load(); });
    });
  }
  stop();
}

void ConnectionServer::accept_loop() {
  for (;;) {
    pollfd fds[2] = {{listener_.fd(), POLLIN, 0}, {wake_[0], POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents != 0) return;
    std::string peer;
    auto s = accept_on(listener_, peer);
    if (!s) continue;  // the peer gave up before we accepted it
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) return;
    // Reap connections whose peer has gone, so a reconnecting peer does not pile up threads.
    for (auto it = connections_.begin(); it != connections_.end();) {
      if (it->finished) {
        it->thread.join();
        it = connections_.erase(it);
      } else {
        ++it;
      }
    }
    // Bounded: past the cap a connection is closed at once, before it costs a thread.
    if (connections_.size() >= max_connections_) {
      if (refused_)
        refused_(peer, std::to_string(connections_.size()) + " connections already open");
      continue;  // `s` closes here
    }
    auto& c = connections_.emplace_back();
    c.socket = std::move(*s);
    c.peer = std::move(peer);
    c.thread = std::thread([this, &c] {
      handler_(c.socket, c.peer);
      c.socket.shutdown();  // the peer sees the end now; the descriptor closes when reaped
      {
        std::lock_guard<std::mutex> lock(mu_);
        c.finished = true;
      }
      ended_.notify_all();
    });
  }
}

}  // namespace troupe::net
