#pragma once

#include <atomic>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <caf/all.hpp>

#include "core/expected.hpp"
#include "net/channel.hpp"

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
  ~ChannelServer();
  ChannelServer(const ChannelServer&) = delete;
  ChannelServer& operator=(const ChannelServer&) = delete;

  uint16_t port() const { return port_; }
  /// Stops accepting, ends every connection and joins the threads. Idempotent.
  void stop();

 private:
  struct Connection {
    net::Socket socket;
    std::string peer;
    std::thread thread;
    std::atomic<bool> finished{false};
  };
  ChannelServer(caf::actor_system& sys, caf::actor shard, net::Socket listener, uint16_t port,
                std::string secret);
  void accept_loop();
  void serve(Connection& c);

  caf::actor_system& sys_;
  caf::actor shard_;
  net::Socket listener_;
  uint16_t port_;
  std::string secret_;
  size_t max_connections_ = 256;
  int wake_[2] = {-1, -1};  // a pipe: writing to it ends accept_loop
  std::thread acceptor_;
  std::mutex mu_;
  std::list<Connection> connections_list_;
  bool stopped_ = false;
};

}  // namespace troupe::actors
