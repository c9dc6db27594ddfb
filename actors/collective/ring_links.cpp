// The ring's links: forming the ring (each rank connects to its right neighbour and
// accepts its left, proving membership), moving to shared memory between ranks of one
// host, and the exchange that sends to the right while receiving from the left.
// The collectives over them are in ring.cpp.
#include "actors/collective/ring.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>

#include "actors/collective/socket_io.hpp"
#include "core/half.hpp"
#include "net/auth.hpp"
#include "net/cluster_spec.hpp"
#include "net/connection_server.hpp"

namespace troupe::collective {

using core::Errc;
using core::make_error;
using clock_type = std::chrono::steady_clock;

namespace {

constexpr uint32_t hello_magic = 0x31475254;  // "TRG1": a ring connection's first bytes

struct Hello {
  uint32_t magic = hello_magic;
  uint32_t rank = 0;
  uint64_t group = 0;
};
static_assert(sizeof(Hello) == 16, "packed by layout");

core::Status set_nonblocking(int fd) {
  const int flags = ::fcntl(fd, F_GETFL, 0);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0)
    return make_error(Errc::io_error, std::string("fcntl: ") + std::strerror(errno));
  return {};
}

}  // namespace

Ring::Ring(int rank, int size, RingOptions options) : rank_(rank), size_(size), options_(options) {}
Ring::~Ring() = default;

core::Expected<std::unique_ptr<Ring>> Ring::form(int rank, std::vector<std::string> addresses,
                                                 RingOptions options) {
  const int size = static_cast<int>(addresses.size());
  if (size < 1 || rank < 0 || rank >= size)
    return make_error(Errc::invalid_argument, "ring: rank " + std::to_string(rank) + " of " +
                                                  std::to_string(size) + " ranks");
  std::unique_ptr<Ring> ring(new Ring(rank, size, options));
  if (size == 1) return ring;
  std::vector<net::HostPort> hp;
  for (const auto& a : addresses) {
    auto p = net::parse_host_port(a);
    if (!p) return p.error();
    hp.push_back(*p);
  }
  uint16_t port = hp[static_cast<size_t>(rank)].port;
  auto listener = net::listen_on(net::bind_host(hp[static_cast<size_t>(rank)].host), port);
  if (!listener) return listener.error();
  const int left = (rank + size - 1) % size, right = (rank + 1) % size;
  const auto deadline = clock_type::now() + options.connect_timeout;

  // The door takes the left neighbour (many handshakes at once, each within its deadline:
  // a slow stranger holds nothing) while this thread connects to the right.
  std::mutex mu;
  std::condition_variable cv;
  net::Socket from_left;
  net::DoorOptions door;
  door.secret = options.secret;
  door.tls = net::links_encrypted();
  door.identity = "ring rank " + std::to_string(rank);
  door.max_unproven = 16;
  auto opened = net::ConnectionServer::start(
      std::move(*listener), port,
      [&](net::Socket& s, const std::string& peer) {
        Hello h;
        if (!detail::read_within(s, &h, sizeof h, std::chrono::milliseconds(2000)) ||
            h.magic != hello_magic || h.group != options.group_id ||
            h.rank != static_cast<uint32_t>(left)) {
          std::fprintf(stderr,
                       "troupe ring: rank %d refused a connection from %s (not rank %d of this "
                       "group)\n",
                       rank, peer.c_str(), left);
          return;
        }
        std::lock_guard<std::mutex> lock(mu);
        if (from_left.valid()) return;  // one left neighbour
        from_left = net::ConnectionServer::keep(s);
        cv.notify_all();
      },
      [rank, log = std::make_shared<net::RefusalLog>()](const std::string& peer,
                                                        const std::string& why) {
        log->say("troupe ring: rank " + std::to_string(rank) + " refused a connection from " +
                 peer + ": " + why);
      },
      8, std::move(door));
  if (!opened) return opened.error();
  std::unique_ptr<net::ConnectionServer> door_server = std::move(*opened);
  core::Status connected;
  for (;;) {
    auto s = net::connect_to(hp[static_cast<size_t>(right)].host,
                             hp[static_cast<size_t>(right)].port, std::chrono::milliseconds(0));
    if (s) {
      if (auto st = net::prove_membership(*s, options.secret, std::chrono::milliseconds(5000),
                                          "ring rank " + std::to_string(right));
          !st) {
        std::fprintf(stderr, "troupe ring: rank %d: rank %d at %s: %s\n", rank, right,
                     addresses[static_cast<size_t>(right)].c_str(), st.error().message.c_str());
        s = st.error();
      }
    }
    if (s) {
      Hello h;
      h.rank = static_cast<uint32_t>(rank);
      h.group = options.group_id;
      if (detail::write_all(*s, &h, sizeof h)) {
        ring->right_ = std::move(*s);
        break;
      }
    }
    if (clock_type::now() >= deadline) {
      connected = make_error(Errc::unavailable,
                             "ring: rank " + std::to_string(rank) + " could not reach rank " +
                                 std::to_string(right) + " (right neighbour) at " +
                                 addresses[static_cast<size_t>(right)]);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the peer is starting
  }
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait_until(lock, deadline, [&] { return from_left.valid(); });
  }
  door_server->stop();  // before the locals its threads use go
  if (!connected.ok()) return connected.error();
  if (!from_left.valid())
    return make_error(Errc::unavailable,
                      "ring: rank " + std::to_string(left) + " (left neighbour) did not connect");
  ring->left_ = std::move(from_left);
  return from_links(rank, size, std::move(ring->left_), std::move(ring->right_), options);
}

core::Expected<std::unique_ptr<Ring>> Ring::from_links(int rank, int size, net::Socket left,
                                                       net::Socket right, RingOptions options) {
  if (size < 1 || rank < 0 || rank >= size)
    return make_error(Errc::invalid_argument, "ring: rank " + std::to_string(rank) + " of " +
                                                  std::to_string(size) + " ranks");
  std::unique_ptr<Ring> ring(new Ring(rank, size, options));
  if (size == 1) return ring;
  ring->left_ = std::move(left);
  ring->right_ = std::move(right);
  ring->stats_.tls_links = (ring->left_.tls() ? 1 : 0) + (ring->right_.tls() ? 1 : 0);
  for (int fd : {ring->left_.fd(), ring->right_.fd()})
    if (auto st = set_nonblocking(fd); !st) return st.error();
  // Large socket buffers keep both directions streaming during a step.
  const int buf = 4 << 20;
  ::setsockopt(ring->right_.fd(), SOL_SOCKET, SO_SNDBUF, &buf, sizeof buf);
  ::setsockopt(ring->left_.fd(), SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
  if (auto st = ring->share_memory(); !st) return st.error();
  return ring;
}

core::Status Ring::share_memory() {
  // Every rank offers its right neighbour a segment (or says it has none) and answers its
  // left neighbour's offer: small messages, so writing first cannot block the ring.
  const int left = (rank_ + size_ - 1) % size_, right = (rank_ + 1) % size_;
  ShmLink mine;
  if (options_.shared_memory)
    if (auto made = ShmLink::create(options_.shared_memory_bytes); made) mine = std::move(*made);
  const ShmLink::Offer offer = mine.offer();
  if (!detail::write_all(right_, &offer, sizeof offer))
    return make_error(Errc::unavailable, "ring: rank " + std::to_string(right) +
                                             " (right neighbour) is gone before the link offer");
  ShmLink::Offer theirs;
  if (!detail::read_within(left_, &theirs, sizeof theirs, options_.connect_timeout))
    return make_error(Errc::unavailable, "ring: rank " + std::to_string(left) +
                                             " (left neighbour) sent no link offer");
  if (theirs.magic != 0 && theirs.magic != ShmLink::offer_magic)
    return make_error(Errc::data_loss,
                      "ring: rank " + std::to_string(left) + " sent a malformed link offer");
  ShmLink in;
  if (options_.shared_memory && theirs.magic == ShmLink::offer_magic)
    if (auto opened = ShmLink::open(theirs); opened) in = std::move(*opened);  // else: TCP
  const uint32_t took[2] = {in ? 1u : 0u, 0};
  uint32_t answer[2] = {0, 0};
  if (!detail::write_all(left_, took, sizeof took) ||
      !detail::read_within(right_, answer, sizeof answer, options_.connect_timeout))
    return make_error(Errc::unavailable, "ring: rank " + std::to_string(right) +
                                             " (right neighbour) did not answer the link offer");
  mine.unlink();  // opened by the neighbour or declined: the name is no longer needed
  if (answer[0] == 1) out_ = std::move(mine);
  in_ = std::move(in);
  stats_.shared_memory_links = (out_ ? 1 : 0) + (in_ ? 1 : 0);
  return {};
}

void Ring::shut_down() {
  for (int fd : {left_.fd(), right_.fd()})
    if (fd >= 0) ::shutdown(fd, SHUT_RDWR);
}

core::Status Ring::check_neighbours(bool sending, bool receiving, const std::string& what,
                                    int wait_ms) {
  pollfd p[2] = {{left_.fd(), POLLRDHUP, 0}, {right_.fd(), POLLRDHUP, 0}};
  if (::poll(p, 2, wait_ms) <= 0) return {};
  constexpr short gone = POLLRDHUP | POLLHUP | POLLERR;
  const int left = (rank_ + size_ - 1) % size_, right = (rank_ + 1) % size_;
  if (receiving && (p[0].revents & gone)) {
    // The left neighbour writes all its bytes before it closes: bytes that came between our
    // last look at the link and its hang-up are still ours to take.
    size_t waiting = 0;
    in_.peek(1, &waiting);
    if (waiting == 0)
      return make_error(Errc::unavailable, "ring: rank " + std::to_string(left) +
                                               " (left neighbour) closed its connection in " +
                                               what);
  }
  if (sending && (p[1].revents & gone))
    return make_error(Errc::unavailable, "ring: rank " + std::to_string(right) +
                                             " (right neighbour) is gone in " + what);
  return {};
}

core::Status Ring::exchange(const char* send, size_t ns, char* recv, size_t nr,
                            const std::string& what, float* add_to, bool bulk,
                            core::DType arriving) {
  // Headers always go over TCP: a rank waiting there for a slow neighbour sleeps in poll.
  ShmLink* const out = bulk && out_ ? &out_ : nullptr;
  ShmLink* const in = bulk && in_ ? &in_ : nullptr;
  size_t sent = 0, got = 0, added = 0;
  // Adds the elements of bytes [added, upto) of `src`, which holds bytes from offset `base`.
  const bool bf16 = arriving == core::DType::bfloat16;
  const size_t element = bf16 ? sizeof(uint16_t) : sizeof(float);
  auto add = [&](const char* src, size_t base, size_t upto) {
    const size_t i0 = added / element, e = upto / element, b = base / element;
    if (bf16) {
      const auto* h = reinterpret_cast<const uint16_t*>(src);
      for (size_t i = i0; i < e; ++i)
        add_to[i] += core::bf16_to_float(h[i - b]);
    } else {
      const auto* f = reinterpret_cast<const float*>(src);
      for (size_t i = i0; i < e; ++i)
        add_to[i] += f[i - b];
    }
    added = upto;
  };
  auto last_progress = clock_type::now();
  constexpr int spin_limit = 200;  // tries before poll (TCP) or before yielding (memory)
  int idle = 0;
  const int left = (rank_ + size_ - 1) % size_, right = (rank_ + 1) % size_;
  while (sent < ns || got < nr) {
    bool progress = false;
    // Shared memory: copy in what fits, take what has come, without blocking.
    if (sent < ns && out) {
      const size_t m = out->write(send + sent, ns - sent);
      sent += m;
      progress = progress || m > 0;
    }
    if (got < nr && in) {
      size_t m = 0;
      const char* at = in->peek(nr - got, &m);
      if (m > 0) {
        if (add_to)
          add(at, got, got + m);
        else
          std::memcpy(recv + got, at, m);
        in->consume(m);
        got += m;
        progress = true;
      }
    }
    // TCP, for a direction without shared memory.
    pollfd p[2];
    nfds_t k = 0;
    int send_slot = -1, recv_slot = -1;
    if (sent < ns && !out) {
      send_slot = static_cast<int>(k);
      p[k++] = {right_.fd(), POLLOUT, 0};
    }
    if (got < nr && !in) {
      recv_slot = static_cast<int>(k);
      p[k++] = {left_.fd(), POLLIN, 0};
    }
    const bool memory_pending = (sent < ns && out) || (got < nr && in);
    const auto waited = clock_type::now() - last_progress;
    const auto left_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(options_.timeout - waited);
    if (!progress && left_ms.count() <= 0) {
      stalled_ = true;
      if (got < nr)
        return make_error(Errc::unavailable,
                          "ring stall: rank " + std::to_string(rank_) + " waited " +
                              std::to_string(options_.timeout.count()) + " ms for rank " +
                              std::to_string(left) + " (its left neighbour) in " + what);
      return make_error(Errc::unavailable,
                        "ring stall: rank " + std::to_string(right) + " (right neighbour of rank " +
                            std::to_string(rank_) + ") takes no bytes in " + what);
    }
    if (k > 0) {
      // Try the sockets first and spin a little before sleeping in poll: on loopback the
      // neighbour's bytes are usually microseconds away, and a poll wake-up costs more.
      if (idle < spin_limit) {
        for (nfds_t i = 0; i < k; ++i)
          p[i].revents = p[i].events;
      } else if (recv_slot >= 0 && net::buffered(left_) > 0) {
        p[recv_slot].revents = POLLIN;  // TLS holds decrypted bytes the socket no longer shows
        if (send_slot >= 0) p[send_slot].revents = POLLOUT;
      } else {
        const int r = ::poll(p, k, memory_pending ? 0 : static_cast<int>(left_ms.count()));
        if (r < 0 && errno != EINTR)
          return make_error(Errc::io_error, std::string("ring poll: ") + std::strerror(errno));
        if (r <= 0) p[0].revents = p[1].revents = 0;
      }
      if (send_slot >= 0 && (p[send_slot].revents & (POLLOUT | POLLERR | POLLHUP))) {
        const ssize_t w = net::send_some(right_, send + sent, ns - sent);
        if (w > 0) {
          sent += static_cast<size_t>(w);
          progress = true;
        } else if (w < 0 && errno != EAGAIN && errno != EINTR) {
          return make_error(Errc::unavailable, "ring: rank " + std::to_string(right) +
                                                   " (right neighbour) is gone (" +
                                                   std::strerror(errno) + ") in " + what);
        }
      }
      if (recv_slot >= 0 && (p[recv_slot].revents & (POLLIN | POLLERR | POLLHUP))) {
        const ssize_t g = net::recv_some(left_, recv + got, nr - got);
        if (g > 0) {
          got += static_cast<size_t>(g);
          // Batch tiny pieces; the last one always.
          if (add_to && (got - added >= 4096 || got == nr)) add(recv, 0, got - got % element);
          progress = true;
        } else if (g == 0 || (errno != EAGAIN && errno != EINTR)) {
          return make_error(Errc::unavailable, "ring: rank " + std::to_string(left) +
                                                   " (left neighbour) closed its connection in " +
                                                   what);
        }
      }
    }
    if (progress) {
      last_progress = clock_type::now();
      idle = 0;
      continue;
    }
    ++idle;
    if (memory_pending && idle > spin_limit) {
      // The neighbour is not keeping up (or is gone): let others run, and look at its
      // connection now and then, which closes when its process ends.
      // After a long wait sleep a millisecond at a time (bounded CPU for ranks > cores).
      const bool sleepy = idle > 64 * spin_limit;
      if (sleepy || idle % 64 == 0)
        if (auto st = check_neighbours(sent < ns && out, got < nr && in, what, sleepy ? 1 : 0); !st)
          return st;
      if (!sleepy) std::this_thread::yield();
    }
  }
  stats_.bytes_sent += ns;
  return {};
}

}  // namespace troupe::collective
