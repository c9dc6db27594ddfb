#include "actors/channel_server.hpp"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "net/auth.hpp"

namespace troupe::actors {

core::Expected<std::unique_ptr<ChannelServer>> ChannelServer::start(caf::actor_system& sys,
                                                                    caf::actor shard,
                                                                    const std::string& host,
                                                                    std::string secret,
                                                                    size_t max_connections) {
  uint16_t port = 0;
  auto listener = net::listen_on(host, port);
  if (!listener) return listener.error();
  std::unique_ptr<ChannelServer> server(
      new ChannelServer(sys, std::move(shard), std::move(*listener), port, std::move(secret)));
  server->max_connections_ = std::max<size_t>(1, max_connections);
  if (::pipe2(server->wake_, O_CLOEXEC) != 0)
    return core::make_error(core::Errc::io_error, "tensor channel: cannot create a pipe");
  server->acceptor_ = std::thread([s = server.get()] { s->accept_loop(); });
  return server;
}

ChannelServer::ChannelServer(caf::actor_system& sys, caf::actor shard, net::Socket listener,
                             uint16_t port, std::string secret)
    : sys_(sys),
      shard_(std::move(shard)),
      listener_(std::move(listener)),
      port_(port),
      secret_(std::move(secret)) {}

ChannelServer::~ChannelServer() {
  stop();
  for (int fd : wake_)
    if (fd >= 0) ::close(fd);
}

void ChannelServer::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) return;
    stopped_ = true;
    for (auto& c : connections_list_)
      c.socket.shutdown();
  }
  if (wake_[1] >= 0) {
    const char byte = 1;
    [[maybe_unused]] ssize_t w = ::write(wake_[1], &byte, 1);
  }
  if (acceptor_.joinable()) acceptor_.join();
  // No new connection can appear now: join every one.
  for (auto& c : connections_list_)
    if (c.thread.joinable()) c.thread.join();
}

void ChannelServer::accept_loop() {
  for (;;) {
    pollfd fds[2] = {{listener_.fd(), POLLIN, 0}, {wake_[0], POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents != 0) return;
    std::string peer;
    auto s = net::accept_on(listener_, peer);
    if (!s) continue;  // the peer gave up before we accepted it
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) return;
    // Reap connections whose peer has gone, so a reconnecting worker does not pile up threads.
    for (auto it = connections_list_.begin(); it != connections_list_.end();) {
      if (it->finished) {
        it->thread.join();
        it = connections_list_.erase(it);
      } else {
        ++it;
      }
    }
    // Bounded: past the cap a connection is closed at once, before it costs a thread.
    if (connections_list_.size() >= max_connections_) {
      std::fprintf(stderr, "troupe: tensor channel: refused %s: %zu connections already open\n",
                   peer.c_str(), connections_list_.size());
      caf::anon_send(shard_, net::refused_atom::value);
      continue;  // `s` closes here
    }
    auto& c = connections_list_.emplace_back();
    c.socket = std::move(*s);
    c.peer = std::move(peer);
    c.thread = std::thread([this, &c] { serve(c); });
  }
}

void ChannelServer::serve(Connection& c) {
  if (!secret_.empty()) {
    // Before any frame: a stranger costs the handshake's bytes and one bounded wait.
    if (auto st = net::authenticate_peer(c.socket, secret_, std::chrono::seconds(5)); !st) {
      std::fprintf(stderr, "troupe: tensor channel: refused %s: %s\n", c.peer.c_str(),
                   st.error().message.c_str());
      caf::anon_send(shard_, net::refused_atom::value);
      c.socket.shutdown();
      c.finished = true;
      return;
    }
  }
  caf::scoped_actor self{sys_};
  for (;;) {
    auto request = net::recv_request(c.socket);
    if (!request) {
      // A peer that hangs up between frames is the normal end of a connection.
      if (request.error().code != core::Errc::unavailable) {
        std::fprintf(stderr, "troupe: tensor channel: request from %s rejected: %s\n",
                     c.peer.c_str(), request.error().to_string().c_str());
        (void)net::send_reply(c.socket, request.error());
      }
      break;
    }
    core::Expected<std::vector<net::PsItem>> reply = std::vector<net::PsItem>{};
    self->request(shard_, caf::infinite, net::batch_atom::value, std::move(*request))
        .receive([&](std::vector<net::PsItem>& items) { reply = std::move(items); },
                 [&](caf::error& e) { reply = net::from_caf(e); });
    if (!net::send_reply(c.socket, reply)) break;
  }
  c.socket.shutdown();  // the peer sees the end now; the descriptor closes when reaped
  c.finished = true;
}

}  // namespace troupe::actors
