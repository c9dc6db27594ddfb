#pragma once

// The gate in front of a node's CAF. CAF 0.17 serves BASP to whoever connects and
// allocates whatever a header announces (up to 4 GiB), so with a cluster secret CAF
// listens nowhere and a gate takes the task's address: each peer proves the secret
// (net/auth.hpp) before one byte reaches CAF, and every BASP frame it then sends is
// checked as it passes; the gate hands each member a socket pair into CAF
// (net/caf_door.hpp). A peer reaches the gate through a tunnel: a loopback port its own
// CAF dials, which serves only sockets of its own process, relayed to the gate after this
// side proves the secret too.
//
//   CAF (client) -> 127.0.0.1:tunnel -> [handshake] -> host:port gate -> socket pair -> CAF
//
// Connections stay CAF's: heartbeats, timeouts and node-down detection pass through, and
// either end closing closes the other.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "core/expected.hpp"
#include "net/channel.hpp"
#include "net/cluster_spec.hpp"
#include "net/connection_server.hpp"

namespace troupe::net {

/// Bounds of a gate and of a tunnel.
struct GateLimits {
  /// The largest BASP payload a peer may announce; CAF's own limit is 4 GiB.
  uint32_t max_message_bytes = 1u << 30;
  /// Members (proven peers) at once.
  size_t max_connections = 256;
  /// The whole handshake, from accept (DoorOptions::deadline).
  std::chrono::milliseconds handshake_timeout{5000};
  /// Unproven peers held at once; past it the oldest is dropped (DoorOptions).
  size_t max_unproven = 64;

  /// Limits that let every other task of `cluster` in at once, never below the defaults:
  /// each a member (twice: a restarted task's new link while its old one has not closed
  /// yet), and each unproven at the same moment, twice too (a job's start, when they all
  /// dial in before the machine has scheduled any of them to answer its challenge, and a
  /// link given up and dialled again before this gate has seen the first one close: at 256
  /// workers on 2 cores, once each was held, members were dropped). A member slow to answer
  /// is not a stranger. A flood of strangers still has a bound, twice the job's size. The
  /// handshake's bound is link_handshake_timeout().
  static GateLimits for_cluster(const ClusterSpec& cluster);
};

/// Follows the BASP frames of a byte stream as it passes: a 32-byte header in network
/// byte order (operation, 2 bytes padding, flags, payload length, operation data, source
/// and destination actor), then the payload. A header naming no BASP operation, or
/// announcing more than the limit, is refused before CAF reads it.
class BaspFrameCheck {
 public:
  static constexpr size_t header_bytes = 32;
  explicit BaspFrameCheck(uint32_t max_payload) : max_payload_(max_payload) {}
  /// The next `n` bytes of the stream. After an error the stream must not go on.
  core::Status feed(const unsigned char* data, size_t n);
  /// Headers seen whole so far.
  uint64_t frames() const { return frames_; }

 private:
  uint32_t max_payload_;
  unsigned char header_[header_bytes] = {};
  size_t have_ = 0;
  uint64_t payload_left_ = 0;
  uint64_t frames_ = 0;
};

/// Copies bytes both ways between `outside` (the network) and `inside` (a CAF socket of
/// this process) until either side ends; what comes from outside passes `check`. The
/// error is the check's refusal, or none when a side simply closed.
core::Status relay(const Socket& outside, const Socket& inside, BaspFrameCheck& check);

/// A new connection to this process's CAF (CafDoor::connect).
using CafInside = std::function<core::Expected<Socket>()>;

/// The server side: listens on `host:port` (port 0 picks one) and relays each peer that
/// proves `secret`, for `identity` (the task, "ps:1"), to a connection `inside` makes.
/// Refused peers are named on stderr, counted and reported to `on_refused`; the gate goes
/// on serving.
class CafGate {
 public:
  static core::Expected<std::unique_ptr<CafGate>> open(const std::string& host, uint16_t port,
                                                       CafInside inside, std::string secret,
                                                       GateLimits limits = {},
                                                       std::function<void()> on_refused = {},
                                                       std::string identity = {});
  uint16_t port() const { return server_->port(); }
  uint64_t refused() const { return refused_; }
  /// Stops accepting and ends every member's link.
  void stop();
  /// Stops accepting and lets each relay run until CAF closes its side (it writes what it
  /// still holds first), for up to `timeout`; then stop().
  void drain(std::chrono::milliseconds timeout);
  ~CafGate();
  /// Members' links relayed now (on the process's RelayPool; over TLS, on threads).
  size_t links() const;
  /// No more calls of `inside` or `on_refused` once this returns: what they reach may be
  /// gone (a member admitted later is closed at once).
  void forget_caf();

 private:
  CafGate() = default;
  void refuse(const std::string& peer, const std::string& why);
  void serve(Socket& outside, const std::string& peer);

  std::string secret_;
  RefusalLog log_;
  GateLimits limits_;
  std::mutex caf_mu_;  // guards inside_ and on_refused_
  CafInside inside_;
  std::function<void()> on_refused_;
  std::atomic<uint64_t> refused_{0};
  uint64_t relays_ = 0;  // this gate's group in RelayPool::process()
  std::unique_ptr<ConnectionServer> server_;
};

/// The client side: a loopback port CAF dials to reach the gate at `host:port`. Each
/// connection to it is relayed there once this process has proved `secret` and the gate
/// has proved it back; a gate that does not is named on stderr and the connection closed.
/// One tunnel per (secret, host, port, dialled), kept until close_tunnels_to: each new
/// link to the task goes through the same loopback port. `dialled` names the task meant: the gate
/// must prove it is that one.
core::Expected<uint16_t> tunnel_to(const std::string& host, uint16_t port,
                                   const std::string& secret, GateLimits limits = {},
                                   const std::string& dialled = {});

/// Closes this process's tunnels to `host:port` (whatever their secret): their listeners
/// and every connection through them end, their threads are joined, and CAF sees its links
/// through them close. For a process done with a peer (a ClusterCoordinator's workers);
/// the next caf_route to that address opens a new tunnel.
void close_tunnels_to(const std::string& host, uint16_t port);

/// The process's bound on a CAF link's handshake, through its tunnels and at its gate:
/// GateLimits' 5 s, or the node's connection timeout where that is longer (a crowded host,
/// net::for_job: there a live member can take longer than 5 s to be scheduled to answer).
/// net::configure sets it; tunnels and GateLimits::for_cluster use it.
void set_link_handshake_timeout(std::chrono::milliseconds timeout);
std::chrono::milliseconds link_handshake_timeout();

/// When one of this process's tunnels last had the task at (host, port) prove the cluster
/// secret; the clock's epoch if none ever did. Through a tunnel, CAF sees a task that is
/// not up and one too busy to finish a handshake alike (the connection closes), so this is
/// what tells them apart. (A TCP connection accepted is no sign: a stopped process's
/// kernel accepts them.)
std::chrono::steady_clock::time_point tunnel_reached(const std::string& host, uint16_t port);

/// Why the last of this process's tunnel tries to the task at (host, port) that failed
/// closed CAF's connection, and when; an empty text if none has. CAF itself sees only
/// `disconnect_during_handshake` whatever it was (nothing listening, a handshake that timed
/// out, too many tries in flight): errors that give up on a task name this instead.
struct TunnelFailure {
  std::string why;
  std::chrono::steady_clock::time_point when{};
  std::string ended;  ///< why the last try that was not turned away at once failed
};
TunnelFailure tunnel_failure(const std::string& host, uint16_t port);

/// Where this process's CAF should connect to reach the CAF port of the task at `host:port`:
/// through a tunnel when the job has a cluster secret (net/auth.hpp), directly when not.
core::Expected<HostPort> caf_route(const std::string& host, uint16_t port,
                                   const std::string& dialled = {});

}  // namespace troupe::net
