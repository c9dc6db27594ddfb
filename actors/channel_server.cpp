#include "actors/channel_server.hpp"

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
      new ChannelServer(sys, std::move(shard), std::move(secret)));
  auto* s = server.get();
  auto started = net::ConnectionServer::start(
      std::move(*listener), port,
      [s](net::Socket& socket, const std::string& peer) { s->serve(socket, peer); },
      [s](const std::string& peer, const std::string& why) { s->refuse(peer, why); },
      max_connections);
  if (!started) return started.error();
  server->server_ = std::move(*started);
  return server;
}

void ChannelServer::refuse(const std::string& peer, const std::string& why) {
  std::fprintf(stderr, "troupe: tensor channel: refused %s: %s\n", peer.c_str(), why.c_str());
  caf::anon_send(shard_, net::refused_atom::value, false);
}

void ChannelServer::serve(net::Socket& socket, const std::string& peer) {
  if (!secret_.empty()) {
    // Before any frame: a stranger costs the handshake's bytes and one bounded wait.
    if (auto st = net::authenticate_peer(socket, secret_, std::chrono::seconds(5)); !st)
      return refuse(peer, st.error().message);
  }
  caf::scoped_actor self{sys_};
  for (;;) {
    auto request = net::recv_request(socket);
    if (!request) {
      // A peer that hangs up between frames is the normal end of a connection.
      if (request.error().code != core::Errc::unavailable) {
        std::fprintf(stderr, "troupe: tensor channel: request from %s rejected: %s\n", peer.c_str(),
                     request.error().to_string().c_str());
        (void)net::send_reply(socket, request.error());
      }
      return;
    }
    core::Expected<std::vector<net::PsItem>> reply = std::vector<net::PsItem>{};
    self->request(shard_, caf::infinite, net::batch_atom::value, std::move(*request))
        .receive([&](std::vector<net::PsItem>& items) { reply = std::move(items); },
                 [&](caf::error& e) { reply = net::from_caf(e); });
    if (!net::send_reply(socket, reply)) return;
  }
}

}  // namespace troupe::actors
