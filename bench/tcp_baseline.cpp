#include "tcp_baseline.hpp"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>

namespace troupe::bench {

namespace {

bool write_all(int fd, const void* p, size_t n) {
  auto* c = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t w = ::write(fd, c, n);
    if (w <= 0) return false;
    c += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool read_all(int fd, void* p, size_t n) {
  auto* c = static_cast<char*>(p);
  while (n > 0) {
    const ssize_t r = ::read(fd, c, n);
    if (r <= 0) return false;
    c += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

void nodelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

}  // namespace

TcpBaseline::TcpBaseline() {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
  ::listen(listen_fd_, 1);
  socklen_t len = sizeof a;
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len);
  server_ = std::thread([this] { serve(); });
  client_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
  ::connect(client_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
  nodelay(client_fd_);
}

TcpBaseline::~TcpBaseline() {
  const uint64_t stop[2] = {0, 0};
  write_all(client_fd_, stop, sizeof stop);
  server_.join();
  ::close(client_fd_);
  ::close(listen_fd_);
}

void TcpBaseline::serve() {
  const int fd = ::accept(listen_fd_, nullptr, nullptr);
  nodelay(fd);
  std::vector<char> data;
  for (;;) {
    uint64_t req[2];  // [kind (1 pull, 2 push), bytes]
    if (!read_all(fd, req, sizeof req) || req[0] == 0) break;
    data.resize(req[1]);
    if (req[0] == 1) {
      if (!write_all(fd, data.data(), data.size())) break;
    } else {
      if (!read_all(fd, data.data(), data.size())) break;
      const uint64_t ack = 1;
      if (!write_all(fd, &ack, sizeof ack)) break;
    }
  }
  ::close(fd);
}

double TcpBaseline::pull(uint64_t n) {
  buf_.resize(n);
  const auto t0 = std::chrono::steady_clock::now();
  const uint64_t req[2] = {1, n};
  write_all(client_fd_, req, sizeof req);
  read_all(client_fd_, buf_.data(), n);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double TcpBaseline::push(uint64_t n) {
  buf_.resize(n);
  const auto t0 = std::chrono::steady_clock::now();
  const uint64_t req[2] = {2, n};
  write_all(client_fd_, req, sizeof req);
  write_all(client_fd_, buf_.data(), n);
  uint64_t ack = 0;
  read_all(client_fd_, &ack, sizeof ack);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace troupe::bench
