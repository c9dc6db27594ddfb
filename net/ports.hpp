#pragma once

#include <cstdint>
#include <vector>

namespace troupe::net {

/// A TCP port on 127.0.0.1 held (bound, not listening) until release(), so that a set of
/// ports can be chosen without handing one out twice.
class PortLease {
 public:
  PortLease() = default;
  PortLease(PortLease&& other) noexcept;
  PortLease& operator=(PortLease&& other) noexcept;
  ~PortLease() { release(); }

  /// A free port below the kernel's ephemeral range, so that no outgoing connection of any
  /// process can be given it between release() and the task binding it; 0 if none found.
  static PortLease acquire();

  uint16_t port() const { return port_; }
  void release();

 private:
  int fd_ = -1;
  uint16_t port_ = 0;
};

}  // namespace troupe::net
