#include "net/ports.hpp"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <random>
#include <utility>

namespace troupe::net {

namespace {

// The low end of the kernel's ephemeral port range (Linux default 32768).
uint16_t ephemeral_low() {
  std::ifstream in("/proc/sys/net/ipv4/ip_local_port_range");
  unsigned low = 32768, high = 60999;
  if (!(in >> low >> high) || low < 2048) low = 32768;
  return static_cast<uint16_t>(low);
}

}  // namespace

PortLease::PortLease(PortLease&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), port_(std::exchange(other.port_, 0)) {}

PortLease& PortLease::operator=(PortLease&& other) noexcept {
  release();
  fd_ = std::exchange(other.fd_, -1);
  port_ = std::exchange(other.port_, 0);
  return *this;
}

void PortLease::release() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

PortLease PortLease::acquire() {
  static thread_local std::mt19937 rng(std::random_device{}());
  const uint16_t high = ephemeral_low();
  const uint16_t low = high > 12000 ? static_cast<uint16_t>(high - 12000) : 1024;
  std::uniform_int_distribution<int> pick(low, high - 1);
  for (int attempt = 0; attempt < 200; ++attempt) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) break;
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(pick(rng)));
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
      PortLease l;
      l.fd_ = fd;
      l.port_ = ntohs(a.sin_port);
      return l;
    }
    ::close(fd);
  }
  return {};
}

}  // namespace troupe::net
