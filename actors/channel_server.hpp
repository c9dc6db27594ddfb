#pragma once

#include <memory>
#include <string>

#include <caf/all.hpp>

#include "core/expected.hpp"
#include "net/channel.hpp"
#include "net/connection_server.hpp"

namespace troupe::actors {

/// The PS side of the tensor channel. It owns no state: every request it reads is handed to
/// the ps_shard actor as a local (psbatch, PsRequest) message, moved, never copied, and the
/// actor's answer is written back. One thread per connection (one per worker), so a slow
/// or misbehaving peer stalls only its own connection; a malformed frame gets an error
/// reply, ends that connection, and is reported on stderr naming the peer.
class ChannelServer {
 public:
  /// Listens on `host` (the PS task's own address) on a free port. With a cluster
  /// `secret`, every connection must prove it (net/auth.hpp) before a frame is read; a
  /// peer that does not is refused, named on stderr and counted by the shard actor
  /// (`refused`). Empty: connections are not authenticated. At most `max_connections`
  /// are open at once (each holds a thread); one more is closed as it arrives, named and
  /// counted the same way.
  static core::Expected<std::unique_ptr<ChannelServer>> start(caf::actor_system& sys,
                                                              caf::actor shard,
                                                              const std::string& host,
                                                              std::string secret = {},
                                                              size_t max_connections = 256);
  ChannelServer(const ChannelServer&) = delete;
  ChannelServer& operator=(const ChannelServer&) = delete;

  uint16_t port() const { return server_->port(); }
  /// Stops accepting, ends every connection and joins the threads. Idempotent.
  void stop() { server_->stop(); }

 private:
  ChannelServer(caf::actor_system& sys, caf::actor shard, std::string secret)
      : sys_(sys), shard_(std::move(shard)), secret_(std::move(secret)) {}
  void serve(net::Socket& socket, const std::string& peer);
  void refuse(const std::string& peer, const std::string& why);

  caf::actor_system& sys_;
  caf::actor shard_;
  std::string secret_;
  std::unique_ptr<net::ConnectionServer> server_;
};

}  // namespace troupe::actors
