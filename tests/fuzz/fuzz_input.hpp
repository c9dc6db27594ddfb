#pragma once

// What the fuzz targets share: the input as a file (for readers that take a path) or on
// the reading end of a socket (for readers of a connection).

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "net/socket.hpp"

namespace troupe::fuzz {

/// The input written to a file of this process's own; removed on destruction.
class InputFile {
 public:
  InputFile(const uint8_t* data, size_t size) {
    path_ = "/tmp/troupe-fuzz-" + std::to_string(::getpid()) + ".bin";
    std::FILE* f = std::fopen(path_.c_str(), "wb");
    if (f != nullptr) {
      if (size > 0) std::fwrite(data, 1, size, f);
      std::fclose(f);
    }
  }
  ~InputFile() { std::remove(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

/// The input waiting in a pipe whose writer has closed, named by a path a reader can open
/// ("/proc/self/fd/N"): a stream with no size and no seek, as a FIFO or standard input is.
/// Inputs beyond the pipe's buffer (1 MiB asked for) are cut there.
class InputPipe {
 public:
  InputPipe(const uint8_t* data, size_t size) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) return;
    ::fcntl(fds[1], F_SETPIPE_SZ, 1 << 20);
    ::fcntl(fds[1], F_SETFL, O_NONBLOCK);
    size_t off = 0;
    while (off < size) {
      const ssize_t w = ::write(fds[1], data + off, size - off);
      if (w <= 0) break;
      off += static_cast<size_t>(w);
    }
    ::close(fds[1]);
    fd_ = fds[0];
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  ~InputPipe() {
    if (fd_ >= 0) ::close(fd_);
  }
  InputPipe(const InputPipe&) = delete;
  InputPipe& operator=(const InputPipe&) = delete;
  const std::string& path() const { return path_; }

 private:
  int fd_ = -1;
  std::string path_;
};

/// The input waiting on a connected socket whose peer then closed: a reader sees exactly
/// these bytes, then the end of the stream. Inputs must fit the socket's buffer (run the
/// targets with -max_len at most 65536).
inline net::Socket input_socket(const uint8_t* data, size_t size) {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) return {};
  int big = 1 << 20;
  ::setsockopt(fds[1], SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
  size_t off = 0;
  while (off < size) {
    const ssize_t w = ::send(fds[1], data + off, size - off, MSG_NOSIGNAL);
    if (w <= 0) break;
    off += static_cast<size_t>(w);
  }
  ::close(fds[1]);
  return net::Socket(fds[0]);
}

}  // namespace troupe::fuzz
