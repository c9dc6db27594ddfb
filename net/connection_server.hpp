#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "core/expected.hpp"
#include "net/channel.hpp"
#include "net/request_pool.hpp"

namespace troupe::net {

/// Lines about refused peers on stderr, at most `burst` each `period`: a flood of strangers
/// must not fill a task's log (or its disk). The first line after a cut says how many
/// were not shown. Thread-safe.
class RefusalLog {
 public:
  explicit RefusalLog(size_t burst = 20, std::chrono::seconds period = std::chrono::seconds(10))
      : burst_(burst), period_(period) {}
  void say(const std::string& line);
  /// Lines not shown so far.
  uint64_t suppressed_total() const;

 private:
  size_t burst_;
  std::chrono::seconds period_;
  mutable std::mutex mu_;
  std::chrono::steady_clock::time_point window_{};
  size_t shown_ = 0;
  uint64_t held_ = 0, held_total_ = 0;
};

/// Membership checked at the door (net/auth.hpp): every accepted connection proves the
/// job's secret before it costs a thread.
struct DoorOptions {
  std::string secret;    // empty: no check, each connection is a member at once
  bool tls = false;      // the link goes on in TLS (started on the member's thread)
  std::string identity;  // who this door is ("ps:1"): a peer's proof must be for it
  /// From accept to the peer's whole proof: a peer sending a byte now and then gains
  /// nothing, it is dropped at the deadline.
  std::chrono::milliseconds deadline{5000};
  /// Unproven connections held at once (apart from members): past it the oldest is
  /// dropped, so strangers never crowd out a member, whose proof takes one round trip.
  size_t max_unproven = 64;
  /// Run on each accepted connection before anything else, on the acceptor's thread (so
  /// it must not block): an error refuses it at once (`cancelled`: the peer has already
  /// gone, so it is dropped without a refusal). For a loopback port that only this
  /// process may use (net::peer_is_this_process).
  std::function<core::Status(const Socket&)> accept_check;
};

/// A listening socket that serves each member on a thread of its own (or, start_pooled,
/// request by request on a net::RequestPool's few threads): what the tensor channel, the
/// CAF port's gate (net/gate.hpp), the tunnels and the collective rings share.
/// With a secret (DoorOptions) one thread, the acceptor, holds every unproven connection
/// and drives its handshake as bytes arrive (never blocking on one); a connection becomes
/// a member, and gets a thread, only once proven. At most `max_connections` members are
/// open at once; one more is closed when it would start, and reported through `refused`,
/// as is every peer that fails its proof or its deadline. Members whose handler returned
/// are reaped on the next accept.
///
/// Supervised, so that no failure stops a door or the process behind it: the acceptor is
/// started again (after 50 ms, doubling to 5 s while it keeps failing) when it throws or
/// its poll fails; out of descriptors or memory, it stops accepting for 100 ms instead of
/// spinning; a member whose thread cannot be made, or whose handler throws, is closed.
/// Each is named on stderr (at most 5 lines per 10 s).
class ConnectionServer {
 public:
  /// Runs on the member's own thread (after the TLS handshake, with tls); the connection
  /// ends when it returns, unless the handler kept it (keep()).
  using Handler = std::function<void(Socket& s, const std::string& peer)>;
  /// A connection turned away: the peer ("host:port") and why.
  using Refused = std::function<void(const std::string& peer, const std::string& why)>;

  static core::Expected<std::unique_ptr<ConnectionServer>> start(Socket listener, uint16_t port,
                                                                 Handler handler, Refused refused,
                                                                 size_t max_connections = 256,
                                                                 DoorOptions door = {});
  /// The same door, its members served request by request (net/request_pool.hpp):
  /// `handler` serves one request of a member whose socket is readable and says whether
  /// its connection goes on. Threads follow the requests in flight, not the members open.
  static core::Expected<std::unique_ptr<ConnectionServer>> start_pooled(
      Socket listener, uint16_t port, RequestPool::Handler handler, Refused refused,
      size_t max_connections, DoorOptions door, RequestPool::Options pool);
  ~ConnectionServer();
  ConnectionServer(const ConnectionServer&) = delete;
  ConnectionServer& operator=(const ConnectionServer&) = delete;

  uint16_t port() const { return port_; }
  /// Members open now, and the threads serving them (the acceptor's apart).
  size_t members() const;
  size_t serving_threads() const;
  /// For a handler (on its member's thread) that keeps its connection past its return (a
  /// ring's link): moves `s` out under the server's lock, so that nothing of the server
  /// (stop() included) touches it again.
  static Socket keep(Socket& s);
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
  struct Unproven;
  ConnectionServer(Socket listener, uint16_t port, Handler handler, Refused refused,
                   size_t max_connections, DoorOptions door);
  // start and start_pooled (with `pool`): the acceptor's thread, and the pool's.
  static core::Expected<std::unique_ptr<ConnectionServer>> launch(
      Socket listener, uint16_t port, Handler handler, RequestPool::Handler request_handler,
      Refused refused, size_t max_connections, DoorOptions door, const RequestPool::Options* pool);
  // A member the pool closed: its failed TLS handshake is refused, the rest is trouble.
  void pool_closed(const std::string& peer, RequestPool::Ended why, const std::string& text);
  // Runs accept_loop, and again after it failed, until stopped.
  void supervise();
  // Returns once stopped; throws (std::system_error for poll) on failure.
  void accept_loop();
  // A line on stderr about this server's own trouble (not a peer's refusal).
  void trouble(const std::string& what);
  // A member: its thread runs (TLS, then) the handler. False when stopped.
  bool admit(Socket s, std::string peer, std::string tls_key);
  // The member's thread: TLS (with a key), then the handler.
  void serve_member(Connection& c, const std::string& tls_key);
  void reap();
  // Ends accept_loop and joins it; connections already accepted go on.
  void stop_accepting();

  Socket listener_;
  uint16_t port_;
  Handler handler_;
  Refused refused_;
  size_t max_connections_;
  DoorOptions door_;
  int wake_[2] = {-1, -1};  // a pipe: writing to it ends accept_loop
  RefusalLog trouble_log_{5, std::chrono::seconds(10)};
  std::thread acceptor_;
  mutable std::mutex mu_;
  std::condition_variable ended_;  // a handler returned
  std::list<Connection> connections_;
  std::unique_ptr<RequestPool> pool_;  // pooled: the members, instead of connections_
  bool stopped_ = false;
};

}  // namespace troupe::net
