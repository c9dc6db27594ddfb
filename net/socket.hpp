#pragma once

// TCP sockets for Troupe's own links (tensor channel, CAF gate and tunnels, ring): hosts
// are names, numeric IPv4 or IPv6 addresses, resolved when a link is made.

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "core/expected.hpp"

namespace troupe::net {

/// A TLS session on a socket (net/tls.hpp).
struct TlsSession;
struct TlsSessionFree {
  void operator()(TlsSession* t) const;
};

/// An owned socket descriptor, with the TLS session it carries once start_tls made one;
/// closes on destruction.
class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  Socket(Socket&& o) noexcept : fd_(o.fd_), tls_(std::move(o.tls_)) { o.fd_ = -1; }
  Socket& operator=(Socket&& o) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  ~Socket() { close(); }

  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void close();
  /// Gives up ownership of a plain socket's descriptor (to CAF, say): the caller closes it.
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  /// Ends both directions: a thread blocked reading this socket returns.
  void shutdown() const;

  /// The TLS session, or null for a plain link.
  TlsSession* tls() const { return tls_.get(); }
  void set_tls(std::unique_ptr<TlsSession, TlsSessionFree> t) { tls_ = std::move(t); }

 private:
  int fd_ = -1;
  std::unique_ptr<TlsSession, TlsSessionFree> tls_;
};

/// What ::recv and ::send do (bytes moved, 0 at the end of the stream, -1 with errno set;
/// EAGAIN when the socket would block or its timeout passed), through the socket's TLS
/// session when it has one. `flags` may hold MSG_DONTWAIT. Sending never raises SIGPIPE.
/// Over TLS, a record that fails its integrity check is -1 with errno EBADMSG; a single
/// socket must not be read or written by two threads at once.
ssize_t recv_some(const Socket& s, void* buf, size_t n, int flags = 0);
ssize_t send_some(const Socket& s, const void* buf, size_t n, int flags = 0);
/// send_some until all `n` bytes are written; false (errno set) on the first failure,
/// a timeout included.
bool send_all(const Socket& s, const void* buf, size_t n);
/// Bytes TLS has already decrypted: readable now, though poll() on the socket may say not.
size_t buffered(const Socket& s);

/// Environment variable: the address every listener of this process binds instead of its
/// task's address (say "0.0.0.0" or "::" in a container whose task name resolves to a
/// service address, not one of the pod's).
inline constexpr const char* bind_address_env = "TROUPE_BIND_ADDRESS";

/// Where a task whose address names `host` listens: TROUPE_BIND_ADDRESS when set; else
/// `host` when it is an address of this machine; else the wildcard ("::", which takes IPv4
/// too, or "0.0.0.0" without IPv6), said once on stderr.
std::string bind_host(const std::string& host);

/// "host:port", with brackets around an IPv6 address ("[::1]:2222").
std::string host_port_text(const std::string& host, uint16_t port);

/// A listening TCP socket on `host` (a name, a numeric IPv4 or IPv6 address; "::" and
/// "0.0.0.0" are every address); port 0 picks a free one. The bound port is stored in
/// `port`. A port another process holds is invalid_argument (permanent), naming it.
core::Expected<Socket> listen_on(const std::string& host, uint16_t& port);
/// Whether the other end of `s`, a TCP connection over IPv4 loopback, is a socket this
/// process holds (Linux: the kernel names the peer's socket, sock_diag over netlink, and
/// /proc/self/fd lists this process's). For a loopback port that only this
/// process may use (a tunnel CAF dials): any other local process, another user's or
/// another container's in the pod, is permission_denied, naming the peer. A peer whose
/// owner has already closed it (the kernel says so: its socket orphaned or gone) is
/// `cancelled`: nobody's refusal, the connection is just dropped unread.
core::Status peer_is_this_process(const Socket& s);

/// Accepts one connection; `peer` receives "host:port" of the other end.
/// An io_error when the process or system is out of descriptors or memory (no peer's
/// fault: try again later), unavailable for one peer's trouble.
core::Expected<Socket> accept_on(const Socket& listener, std::string& peer);
/// Connects with TCP_NODELAY to the first of `host`'s addresses that answers; every later
/// read or write on the socket gives up after `io_timeout` (0: never), and so does the
/// connect itself.
core::Expected<Socket> connect_to(const std::string& host, uint16_t port,
                                  std::chrono::milliseconds io_timeout);

/// Every later read or write on `s` gives up after `t` (EAGAIN; 0: never).
void set_io_timeout(const Socket& s, std::chrono::milliseconds t);
/// Waits at most `t` for `s` to have bytes to read (or be closed); false when none came.
bool wait_readable(const Socket& s, std::chrono::milliseconds t);

}  // namespace troupe::net
