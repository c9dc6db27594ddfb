#pragma once

// The tensor channel: batched PS requests and their replies over a plain TCP stream,
// tensor bytes written from and read into the tensors' own memory. CAF stays the control
// plane (closures, placement, failure detection); this carries the bulk bytes of the hot
// path (pull, push, push-pull). Frame layout: docs/wire-format.md.

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "core/expected.hpp"
#include "net/wire.hpp"

namespace troupe::net {

/// An owned socket descriptor; closes on destruction.
class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  Socket(Socket&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Socket& operator=(Socket&& o) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  ~Socket() { close(); }

  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void close();
  /// Ends both directions: a thread blocked reading this socket returns.
  void shutdown() const;

 private:
  int fd_ = -1;
};

/// Bounds on what a frame may claim, checked before anything is allocated.
struct ChannelLimits {
  uint32_t max_items = 1u << 16;
  uint32_t max_meta_bytes = 16u << 20;
  uint64_t max_payload_bytes = max_wire_tensor_bytes;
};

/// A listening TCP socket on `host` (a numeric address); port 0 picks a free one. The
/// bound port is stored in `port`.
core::Expected<Socket> listen_on(const std::string& host, uint16_t& port);
/// Accepts one connection; `peer` receives "host:port" of the other end.
core::Expected<Socket> accept_on(const Socket& listener, std::string& peer);
/// Connects with TCP_NODELAY; every later read or write on the socket gives up after
/// `io_timeout` (0: never).
core::Expected<Socket> connect_to(const std::string& host, uint16_t port,
                                  std::chrono::milliseconds io_timeout);

core::Status send_request(const Socket& s, const PsRequest& request);
/// The next request. A peer that closed the connection between frames is `unavailable`;
/// a frame that is malformed, truncated or over `limits` is `data_loss` or
/// `invalid_argument`, and the stream cannot be read further.
core::Expected<PsRequest> recv_request(const Socket& s, const ChannelLimits& limits = {});

/// Sends the PS's items, or its error.
core::Status send_reply(const Socket& s, const core::Expected<std::vector<PsItem>>& reply);
/// The reply: the PS's items, the error the PS sent, or what went wrong on the way.
core::Expected<std::vector<PsItem>> recv_reply(const Socket& s, const ChannelLimits& limits = {});

}  // namespace troupe::net
