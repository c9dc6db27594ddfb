#include "net/socket.hpp"

#include <arpa/inet.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

namespace troupe::net {

using core::Errc;
using core::make_error;

namespace {

core::Error io_error(const std::string& what, int err) {
  if (err == EAGAIN || err == EWOULDBLOCK || err == EINPROGRESS)
    return make_error(Errc::unavailable, what + " timed out");
  return make_error(Errc::unavailable, what + ": " + std::strerror(err));
}

core::Status set_nodelay(int fd) {
  int one = 1;
  if (::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0)
    return io_error("setsockopt(TCP_NODELAY)", errno);
  return {};
}

bool is_wildcard(const std::string& host) {
  return host.empty() || host == "*" || host == "::" || host == "0.0.0.0";
}

// The addresses of `host` for TCP (IPv4 and IPv6); `passive` for binding.
using AddrList = std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)>;
core::Expected<AddrList> resolve(const std::string& host, uint16_t port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo* out = nullptr;
  const std::string service = std::to_string(port);
  const char* node = host.c_str();
  if (is_wildcard(host)) {
    node = host == "0.0.0.0" ? "0.0.0.0" : nullptr;  // nullptr + passive: every address
    hints.ai_family = host == "0.0.0.0" ? AF_INET : AF_INET6;
    hints.ai_flags |= AI_PASSIVE;
  }
  const int rc = ::getaddrinfo(node, service.c_str(), &hints, &out);
  if (rc != 0)
    return make_error(Errc::unavailable,
                      "cannot resolve '" + host + "': " + std::string(::gai_strerror(rc)));
  return AddrList(out, &::freeaddrinfo);
}

std::string text_of(const sockaddr* a) {
  char text[INET6_ADDRSTRLEN] = {};
  if (a->sa_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(a);
    if (IN6_IS_ADDR_V4MAPPED(&v6->sin6_addr)) {  // an IPv4 peer of a dual-stack listener
      ::inet_ntop(AF_INET, &v6->sin6_addr.s6_addr[12], text, sizeof text);
      return host_port_text(text, ntohs(v6->sin6_port));
    }
    ::inet_ntop(AF_INET6, &v6->sin6_addr, text, sizeof text);
    return host_port_text(text, ntohs(v6->sin6_port));
  }
  const auto* v4 = reinterpret_cast<const sockaddr_in*>(a);
  ::inet_ntop(AF_INET, &v4->sin_addr, text, sizeof text);
  return host_port_text(text, ntohs(v4->sin_port));
}

uint16_t port_of(const sockaddr_storage& a) {
  return a.ss_family == AF_INET6 ? ntohs(reinterpret_cast<const sockaddr_in6&>(a).sin6_port)
                                 : ntohs(reinterpret_cast<const sockaddr_in&>(a).sin_port);
}

void set_timeouts(int fd, std::chrono::milliseconds t) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(t.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((t.count() % 1000) * 1000);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

// A socket for the first of `host`'s addresses on which `use` succeeds (binds, connects);
// the last failure when none does.
template <class Use>
core::Expected<Socket> first_address(const std::string& host, uint16_t port, bool passive,
                                     Use use) {
  auto list = resolve(host, port, passive);
  if (!list) return list.error();
  core::Error last = make_error(Errc::unavailable, "no address for '" + host + "'");
  for (const addrinfo* a = list->get(); a != nullptr; a = a->ai_next) {
    Socket s(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
    if (!s.valid()) {
      last = io_error("socket", errno);
      continue;
    }
    if (auto st = use(s, a); !st) {
      last = st.error();
      continue;
    }
    return s;
  }
  return last;
}

// Whether this machine can bind `host`: false when it is no address of ours.
bool bindable(const std::string& host) {
  return first_address(host, 0, /*passive=*/true,
                       [](Socket& s, const addrinfo* a) -> core::Status {
                         if (::bind(s.fd(), a->ai_addr, a->ai_addrlen) != 0)
                           return io_error("bind", errno);
                         return {};
                       })
      .ok();
}

}  // namespace

Socket& Socket::operator=(Socket&& o) noexcept {
  if (this != &o) {
    close();
    fd_ = o.fd_;
    o.fd_ = -1;
    tls_ = std::move(o.tls_);
  }
  return *this;
}

void Socket::close() {
  tls_.reset();  // before the descriptor it reads
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void Socket::shutdown() const {
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
}

std::string host_port_text(const std::string& host, uint16_t port) {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

std::string bind_host(const std::string& host) {
  if (const char* forced = std::getenv(bind_address_env); forced != nullptr && *forced != '\0')
    return forced;
  if (is_wildcard(host) || bindable(host)) return host;
  const std::string wildcard = bindable("::") ? "::" : "0.0.0.0";
  static std::mutex mu;
  static std::set<std::string> said;
  std::lock_guard<std::mutex> lock(mu);
  if (said.insert(host).second)
    std::fprintf(stderr,
                 "troupe: '%s' is not an address of this machine: listening on %s instead (set "
                 "%s to choose)\n",
                 host.c_str(), wildcard.c_str(), bind_address_env);
  return wildcard;
}

core::Expected<Socket> listen_on(const std::string& host, uint16_t& port) {
  auto s = first_address(host, port, /*passive=*/true, [&](Socket& s, const addrinfo* a) {
    int one = 1, zero = 0;
    ::setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    // The IPv6 wildcard takes IPv4 peers too.
    if (a->ai_family == AF_INET6)
      ::setsockopt(s.fd(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
    if (::bind(s.fd(), a->ai_addr, a->ai_addrlen) == 0) return core::Status{};
    // Held by another process: no restart frees it, so it is not worth one.
    if (errno == EADDRINUSE)
      return core::Status(make_error(Errc::invalid_argument,
                                     host_port_text(host, port) + " is in use by another process"));
    return core::Status(io_error("bind " + host_port_text(host, port), errno));
  });
  if (!s) return s.error();
  // A backlog for hundreds of peers dialling at once (a job's start): a full queue drops
  // their SYNs, and each waits a retransmission (1 s, 3 s, ...) to be heard. The kernel
  // caps it at net.core.somaxconn.
  if (::listen(s->fd(), 4096) != 0) return io_error("listen", errno);
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  if (::getsockname(s->fd(), reinterpret_cast<sockaddr*>(&bound), &len) != 0)
    return io_error("getsockname", errno);
  port = port_of(bound);
  return s;
}

namespace {

// What the kernel says of the TCP socket at one end of a loopback connection.
struct TcpEnd {
  enum class Kind {
    unknown,  // not asked, or the answer was unclear (a sandbox without sock_diag)
    open,     // held by some process: `inode` names it
    closed,   // its owner closed it (orphaned, in TIME_WAIT, or gone entirely)
  } kind = Kind::unknown;
  unsigned long inode = 0;
};

// The same from /proc/net/tcp, for where netlink is not allowed: read in one piece (a
// table read in several may skip a line while sockets come and go). A missing line is
// not proof of a closed socket here, so it is unknown.
TcpEnd proc_tcp_end(const sockaddr_in& src, const sockaddr_in& dst) {
  // The kernel prints an IPv4 address as the 32-bit word it stores, in hex, and the port
  // as a number.
  char local_hex[32], remote_hex[32];
  std::snprintf(local_hex, sizeof local_hex, "%08X:%04X", src.sin_addr.s_addr, ntohs(src.sin_port));
  std::snprintf(remote_hex, sizeof remote_hex, "%08X:%04X", dst.sin_addr.s_addr,
                ntohs(dst.sin_port));
  FILE* table = std::fopen("/proc/net/tcp", "re");
  if (table == nullptr) return {};
  std::vector<char> buffer(8 << 20);
  std::setvbuf(table, buffer.data(), _IOFBF, buffer.size());
  TcpEnd end;
  char line[512];
  while (end.kind == TcpEnd::Kind::unknown && std::fgets(line, sizeof line, table) != nullptr) {
    char local[64], remote[64];
    unsigned long ino = 0;
    // sl local rem st tx:rx tr:when retrnsmt uid timeout inode
    if (std::sscanf(line, " %*s %63s %63s %*s %*s %*s %*s %*s %*s %lu", local, remote, &ino) == 3 &&
        std::strcmp(local, local_hex) == 0 && std::strcmp(remote, remote_hex) == 0) {
      end.inode = ino;
      end.kind = ino != 0 ? TcpEnd::Kind::open : TcpEnd::Kind::closed;
    }
  }
  std::fclose(table);
  return end;
}

// The IPv4 TCP socket bound to `src` and connected to `dst` (sock_diag's exact lookup over
// netlink). A socket without an inode has been closed by its owner (the kernel finishes
// its goodbye alone); no socket at all, likewise.
TcpEnd tcp_end(const sockaddr_in& src, const sockaddr_in& dst) {
  const int fd = ::socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
  if (fd < 0) return proc_tcp_end(src, dst);  // no sock_diag here (a sandbox)
  struct {
    nlmsghdr header;
    inet_diag_req_v2 req;
  } ask{};
  ask.header.nlmsg_len = sizeof ask;
  ask.header.nlmsg_type = SOCK_DIAG_BY_FAMILY;
  ask.header.nlmsg_flags = NLM_F_REQUEST;
  ask.req.sdiag_family = AF_INET;
  ask.req.sdiag_protocol = IPPROTO_TCP;
  ask.req.idiag_states = ~0u;
  ask.req.id.idiag_sport = src.sin_port;
  ask.req.id.idiag_dport = dst.sin_port;
  ask.req.id.idiag_src[0] = src.sin_addr.s_addr;
  ask.req.id.idiag_dst[0] = dst.sin_addr.s_addr;
  ask.req.id.idiag_cookie[0] = INET_DIAG_NOCOOKIE;
  ask.req.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  TcpEnd end;
  if (::sendto(fd, &ask, sizeof ask, 0, reinterpret_cast<sockaddr*>(&kernel), sizeof kernel) ==
      static_cast<ssize_t>(sizeof ask)) {
    alignas(nlmsghdr) char buf[8192];
    timeval tv{2, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n > 0) {
      auto* h = reinterpret_cast<nlmsghdr*>(buf);
      const auto len = static_cast<size_t>(n);  // NLMSG_OK, without its signed compare
      if (len >= sizeof(nlmsghdr) && h->nlmsg_len >= sizeof(nlmsghdr) && h->nlmsg_len <= len) {
        if (h->nlmsg_type == SOCK_DIAG_BY_FAMILY) {
          end.inode = static_cast<const inet_diag_msg*>(NLMSG_DATA(h))->idiag_inode;
          end.kind = end.inode != 0 ? TcpEnd::Kind::open : TcpEnd::Kind::closed;
        } else if (h->nlmsg_type == NLMSG_ERROR) {
          // ENOENT: the exact lookup found no such socket (closed and gone).
          const auto* e = static_cast<const nlmsgerr*>(NLMSG_DATA(h));
          if (e->error == -ENOENT) end.kind = TcpEnd::Kind::closed;
        }
      }
    }
  }
  ::close(fd);
  return end;
}

// The size of this process's descriptor table (FDSize in /proc/self/status): every open
// descriptor is below it.
core::Expected<long> descriptor_table_size() {
  std::FILE* f = std::fopen("/proc/self/status", "re");
  if (f == nullptr) return io_error("reading /proc/self/status", errno);
  long size = -1;
  char line[256];
  while (size < 0 && std::fgets(line, sizeof line, f) != nullptr)
    if (std::strncmp(line, "FDSize:", 7) == 0) size = std::strtol(line + 7, nullptr, 10);
  std::fclose(f);
  if (size < 0) return make_error(Errc::io_error, "/proc/self/status has no FDSize line");
  return size;
}

// Whether one of this process's descriptors is the socket `inode`; an error when
// /proc/self/status cannot be read. A socket descriptor's fstat gives its inode: one cheap
// call per descriptor, newest (highest) first, where a connection just made usually is.
// (Reading each /proc/self/fd/N link instead cost a path walk each: a chief with tunnels to
// 500 tasks holds thousands of descriptors, and those checks took the host's CPU at the
// job's start.) The connection checked was made before the table's size is read, so its
// descriptor is below it.
core::Expected<bool> holds_socket(unsigned long inode) {
  auto size = descriptor_table_size();
  if (!size) return size.error();
  for (long fd = *size - 1; fd >= 0; --fd) {
    struct stat st {};
    if (::fstat(static_cast<int>(fd), &st) == 0 && S_ISSOCK(st.st_mode) && st.st_ino == inode)
      return true;
  }
  return false;
}

}  // namespace

core::Status peer_is_this_process(const Socket& s) {
  sockaddr_in mine{}, theirs{};
  socklen_t a = sizeof mine, b = sizeof theirs;
  if (::getsockname(s.fd(), reinterpret_cast<sockaddr*>(&mine), &a) != 0 ||
      ::getpeername(s.fd(), reinterpret_cast<sockaddr*>(&theirs), &b) != 0 ||
      mine.sin_family != AF_INET || theirs.sin_family != AF_INET)
    return make_error(Errc::permission_denied, "not an IPv4 connection");
  const std::string peer = text_of(reinterpret_cast<const sockaddr*>(&theirs));
  const auto gone = [&] {
    return make_error(Errc::cancelled,
                      peer +
                          " was closed by its owner before it was checked (nothing of it "
                          "is read)");
  };
  // The peer's socket is the one whose source is their end and destination ours: asked
  // of the kernel exactly (sock_diag), not read from /proc/net/tcp, which can skip a line
  // while sockets come and go (a flood of strangers is such a time).
  auto end = tcp_end(theirs, mine);
  if (end.kind == TcpEnd::Kind::closed) return gone();
  if (end.kind == TcpEnd::Kind::open) {
    auto ours = holds_socket(end.inode);
    if (!ours) return make_error(Errc::permission_denied, peer + ": " + ours.error().message);
    if (*ours) return {};
    // Not among our descriptors: another process's, or ours closed in between (a loaded
    // process's CAF gives a connection up while it waits to be accepted).
    if (tcp_end(theirs, mine).kind == TcpEnd::Kind::closed) return gone();
  }
  return make_error(Errc::permission_denied,
                    peer +
                        " is another process's connection (only this process's CAF may use "
                        "this loopback port)");
}

core::Expected<Socket> accept_on(const Socket& listener, std::string& peer) {
  sockaddr_storage a{};
  socklen_t len = sizeof(a);
  int fd;
  do {
    fd = ::accept4(listener.fd(), reinterpret_cast<sockaddr*>(&a), &len, SOCK_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    const int err = errno;
    // The process or system out of descriptors or memory: io_error, so that an acceptor
    // can tell it from one peer's trouble and wait before it tries again.
    if (err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM)
      return make_error(Errc::io_error, std::string("accept: ") + std::strerror(err));
    return io_error("accept", err);
  }
  Socket s(fd);
  peer = text_of(reinterpret_cast<const sockaddr*>(&a));
  if (auto st = set_nodelay(fd); !st) return st.error();
  return s;
}

core::Expected<Socket> connect_to(const std::string& host, uint16_t port,
                                  std::chrono::milliseconds io_timeout) {
  auto s = first_address(host, port, /*passive=*/false, [&](Socket& s, const addrinfo* a) {
    if (io_timeout.count() > 0) set_timeouts(s.fd(), io_timeout);
    int r;
    do {
      r = ::connect(s.fd(), a->ai_addr, a->ai_addrlen);
    } while (r != 0 && errno == EINTR);
    if (r != 0) return core::Status(io_error("connect to " + host_port_text(host, port), errno));
    return core::Status{};
  });
  if (!s) return s.error();
  if (auto st = set_nodelay(s->fd()); !st) return st.error();
  return s;
}

void set_io_timeout(const Socket& s, std::chrono::milliseconds t) {
  set_timeouts(s.fd(), t);
}

bool wait_readable(const Socket& s, std::chrono::milliseconds t) {
  if (buffered(s) > 0) return true;
  const auto deadline = std::chrono::steady_clock::now() + t;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd p{s.fd(), POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(std::max<int64_t>(0, left.count())));
    if (ready > 0) return true;
    if (ready == 0 || errno != EINTR) return false;
  }
}

}  // namespace troupe::net
