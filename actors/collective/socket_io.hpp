#pragma once

// Blocking reads and writes of whole small messages on a socket, bounded in time: the
// ring's and the elastic group's hellos and plans (bulk bytes go through Ring::exchange).
// Either may go through the socket's TLS session (net/tls.hpp).

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <functional>

#include "net/socket.hpp"

namespace troupe::collective::detail {

/// Reads exactly n bytes within `timeout`; false on timeout, end of stream or error, and
/// when `stop` (asked at least every 50 ms) says to give up.
inline bool read_within(const net::Socket& s, void* buf, size_t n,
                        std::chrono::milliseconds timeout, const std::function<bool()>& stop = {}) {
  using clock_type = std::chrono::steady_clock;
  auto* p = static_cast<char*>(buf);
  const auto deadline = clock_type::now() + timeout;
  size_t got = 0;
  while (got < n) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock_type::now());
    if (left.count() <= 0 || (stop && stop())) return false;
    pollfd p1{s.fd(), POLLIN, 0};
    const auto slice = stop ? std::min<int64_t>(left.count(), 50) : left.count();
    if (net::buffered(s) == 0 && ::poll(&p1, 1, static_cast<int>(slice)) <= 0) continue;
    const ssize_t r = net::recv_some(s, p + got, n - got, MSG_DONTWAIT);
    if (r <= 0) {
      if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      return false;
    }
    got += static_cast<size_t>(r);
  }
  return true;
}

/// Writes all n bytes (a small message: the socket buffer takes it); false on error.
inline bool write_all(const net::Socket& s, const void* buf, size_t n) {
  const auto* p = static_cast<const char*>(buf);
  size_t sent = 0;
  while (sent < n) {
    const ssize_t w = net::send_some(s, p + sent, n - sent);
    if (w < 0 && errno == EAGAIN) {
      pollfd p1{s.fd(), POLLOUT, 0};
      ::poll(&p1, 1, 1000);
      continue;
    }
    if (w <= 0) return false;
    sent += static_cast<size_t>(w);
  }
  return true;
}

}  // namespace troupe::collective::detail
