#pragma once

// Two connected stream sockets in one process, for tests of what crosses a connection.

#include <sys/socket.h>

#include <catch2/catch.hpp>

#include "net/channel.hpp"

namespace troupe::test {

struct SocketPair {
  net::Socket a, b;
  SocketPair() {
    int fds[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0);
    a = net::Socket(fds[0]);
    b = net::Socket(fds[1]);
  }
};

}  // namespace troupe::test
