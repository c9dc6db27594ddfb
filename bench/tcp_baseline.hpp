#pragma once

// A raw TCP loopback baseline for transfer benchmarks: a thread serving requests of
// "send me N bytes" (pull-shaped) and "here are N bytes" (push-shaped), each answered
// after the whole payload has moved, over one connection with TCP_NODELAY.

#include <cstdint>
#include <thread>
#include <vector>

namespace troupe::bench {

class TcpBaseline {
 public:
  TcpBaseline();
  ~TcpBaseline();
  TcpBaseline(const TcpBaseline&) = delete;
  TcpBaseline& operator=(const TcpBaseline&) = delete;

  /// Client asks for n bytes, server sends them: seconds for one round.
  double pull(uint64_t n);
  /// Client sends n bytes, server acknowledges: seconds for one round.
  double push(uint64_t n);

 private:
  void serve();
  int listen_fd_ = -1, client_fd_ = -1;
  std::thread server_;
  std::vector<char> buf_;
};

}  // namespace troupe::bench
