#pragma once

// Blocking reads and writes of whole small messages on a socket, bounded in time: the
// ring's and the elastic group's hellos and plans (bulk bytes go through Ring::exchange).

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <cstddef>

namespace troupe::collective::detail {

/// Reads exactly n bytes within `timeout`; false on timeout, end of stream or error.
inline bool read_within(int fd, void* buf, size_t n, std::chrono::milliseconds timeout) {
  using clock_type = std::chrono::steady_clock;
  auto* p = static_cast<char*>(buf);
  const auto deadline = clock_type::now() + timeout;
  size_t got = 0;
  while (got < n) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock_type::now());
    if (left.count() <= 0) return false;
    pollfd p1{fd, POLLIN, 0};
    if (::poll(&p1, 1, static_cast<int>(left.count())) <= 0) continue;
    const ssize_t r = ::recv(fd, p + got, n - got, MSG_DONTWAIT);
    if (r <= 0) {
      if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      return false;
    }
    got += static_cast<size_t>(r);
  }
  return true;
}

/// Writes all n bytes (a small message: the socket buffer takes it); false on error.
inline bool write_all(int fd, const void* buf, size_t n) {
  const auto* p = static_cast<const char*>(buf);
  size_t sent = 0;
  while (sent < n) {
    const ssize_t w = ::send(fd, p + sent, n - sent, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && errno == EAGAIN) {
      pollfd p1{fd, POLLOUT, 0};
      ::poll(&p1, 1, 1000);
      continue;
    }
    if (w <= 0) return false;
    sent += static_cast<size_t>(w);
  }
  return true;
}

}  // namespace troupe::collective::detail
