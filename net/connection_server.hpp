#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "core/expected.hpp"
#include "net/channel.hpp"

namespace troupe::net {

/// A listening socket with one thread per accepted connection: what the tensor channel and
/// the CAF port's gate (net/gate.hpp) share. At most `max_connections` are open at once;
/// one more is closed as it arrives, before it costs a thread, and reported through
/// `refused`. Connections whose handler returned are reaped on the next accept.
class ConnectionServer {
 public:
  /// Runs on the connection's own thread; the connection ends when it returns.
  using Handler = std::function<void(Socket& s, const std::string& peer)>;
  /// A connection turned away: the peer ("host:port") and why.
  using Refused = std::function<void(const std::string& peer, const std::string& why)>;

  static core::Expected<std::unique_ptr<ConnectionServer>> start(Socket listener, uint16_t port,
                                                                 Handler handler, Refused refused,
                                                                 size_t max_connections = 256);
  ~ConnectionServer();
  ConnectionServer(const ConnectionServer&) = delete;
  ConnectionServer& operator=(const ConnectionServer&) = delete;

  uint16_t port() const { return port_; }
  /// Stops accepting, shuts every connection down and joins the threads. Idempotent; a
  /// handler must return once its socket is shut down.
  void stop();
  /// Stops accepting (closes the listener: a peer dialling now is refused) and gives the
  /// open connections up to `timeout` to end by themselves (their handlers return), then
  /// stop(): what a connection still carries when its server is asked to end gets
  /// through, for a peer that ends it in that time.
  void drain(std::chrono::milliseconds timeout);

 private:
  struct Connection {
    Socket socket;
    std::string peer;
    std::thread thread;
    std::atomic<bool> finished{false};
  };
  ConnectionServer(Socket listener, uint16_t port, Handler handler, Refused refused,
                   size_t max_connections);
  void accept_loop();
  // Ends accept_loop and joins it; connections already accepted go on.
  void stop_accepting();

  Socket listener_;
  uint16_t port_;
  Handler handler_;
  Refused refused_;
  size_t max_connections_;
  int wake_[2] = {-1, -1};  // a pipe: writing to it ends accept_loop
  std::thread acceptor_;
  std::mutex mu_;
  std::condition_variable ended_;  // a handler returned
  std::list<Connection> connections_;
  bool stopped_ = false;
};

}  // namespace troupe::net
