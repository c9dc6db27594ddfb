#include "net/gate.hpp"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "net/auth.hpp"
#include "net/relay_pool.hpp"
#include "net/tls.hpp"

namespace troupe::net {

using core::Errc;
using core::make_error;

namespace {

constexpr unsigned char last_basp_operation = 0x06;  // heartbeat; 0x00 is server_handshake

uint32_t read_be32(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

}  // namespace

core::Status BaspFrameCheck::feed(const unsigned char* data, size_t n) {
  while (n > 0) {
    if (payload_left_ > 0) {
      const size_t take = static_cast<size_t>(std::min<uint64_t>(payload_left_, n));
      payload_left_ -= take;
      data += take;
      n -= take;
      continue;
    }
    const size_t take = std::min(header_bytes - have_, n);
    std::memcpy(header_ + have_, data, take);
    have_ += take;
    data += take;
    n -= take;
    if (have_ < header_bytes) break;
    have_ = 0;
    ++frames_;
    if (header_[0] > last_basp_operation)
      return make_error(Errc::invalid_argument, "BASP frame " + std::to_string(frames_) +
                                                    ": unknown operation " +
                                                    std::to_string(header_[0]));
    const uint32_t len = read_be32(header_ + 4);
    if (len > max_payload_)
      return make_error(Errc::invalid_argument, "BASP frame " + std::to_string(frames_) +
                                                    " announces " + std::to_string(len) +
                                                    " payload bytes (limit " +
                                                    std::to_string(max_payload_) + ")");
    payload_left_ = len;
  }
  return {};
}

core::Status relay(const Socket& outside, const Socket& inside, BaspFrameCheck& check) {
  std::vector<unsigned char> buf(64 << 10);
  const Socket* ends[2] = {&outside, &inside};
  for (;;) {
    pollfd fds[2] = {{outside.fd(), POLLIN, 0}, {inside.fd(), POLLIN, 0}};
    if (buffered(outside) > 0) {
      fds[0].revents = POLLIN;  // TLS holds decrypted bytes the socket no longer shows
    } else if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return {};
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].revents == 0) continue;
      // Never blocks: over TLS a readable socket may hold only part of a record.
      const ssize_t r = recv_some(*ends[i], buf.data(), buf.size(), MSG_DONTWAIT);
      if (r < 0 && errno == EAGAIN) continue;
      if (r < 0 && errno == EBADMSG)
        return make_error(Errc::data_loss, "a TLS record failed its integrity check");
      if (r <= 0) return {};
      const auto n = static_cast<size_t>(r);
      if (i == 0)
        if (auto st = check.feed(buf.data(), n); !st) return st;
      if (!send_all(*ends[1 - i], buf.data(), n)) return {};
    }
  }
}

namespace {
std::atomic<int64_t> handshake_ms{GateLimits{}.handshake_timeout.count()};

// A proven link of a gate or tunnel, relayed until either side ends; `ended` is told why.
// A plain link goes to the process's relay pool and this (the member's) thread returns at
// once; one over TLS, or where the pool has no thread, is relayed here. `served` is the
// one of the two sockets the ConnectionServer owns (moved out of its reach first).
void relay_link(uint64_t group, Socket& outside, Socket& inside, Socket& served,
                uint32_t max_payload, const RelayPool::Ended& ended) {
  if (!outside.tls() && RelayPool::process().available()) {
    Socket kept = ConnectionServer::keep(served);
    Socket& o = &served == &outside ? kept : outside;
    Socket& i = &served == &outside ? inside : kept;
    if (RelayPool::process().add(group, o, i, max_payload, ended)) return;
    served = std::move(kept);
  }
  BaspFrameCheck check(max_payload);
  ended(relay(outside, inside, check));
}
}  // namespace

void set_link_handshake_timeout(std::chrono::milliseconds timeout) {
  handshake_ms = std::max(GateLimits{}.handshake_timeout, timeout).count();
}

std::chrono::milliseconds link_handshake_timeout() {
  return std::chrono::milliseconds(handshake_ms.load());
}

GateLimits GateLimits::for_cluster(const ClusterSpec& cluster) {
  GateLimits limits;
  limits.handshake_timeout = link_handshake_timeout();
  const size_t tasks = cluster.tasks().size();
  limits.max_connections = std::max(limits.max_connections, 2 * tasks + 16);
  limits.max_unproven = std::max(limits.max_unproven, 2 * tasks + 16);
  return limits;
}

core::Expected<std::unique_ptr<CafGate>> CafGate::open(const std::string& host, uint16_t port,
                                                       CafInside inside, std::string secret,
                                                       GateLimits limits,
                                                       std::function<void()> on_refused,
                                                       std::string identity) {
  if (secret.empty())
    return make_error(Errc::invalid_argument, "a CAF gate needs the cluster secret");
  auto listener = listen_on(host, port);
  if (!listener) return listener.error();
  std::unique_ptr<CafGate> gate(new CafGate);
  gate->inside_ = std::move(inside);
  gate->secret_ = std::move(secret);
  gate->limits_ = limits;
  gate->on_refused_ = std::move(on_refused);
  gate->relays_ = RelayPool::process().new_group();
  auto* g = gate.get();
  DoorOptions door;  // each peer proves the secret before it costs a thread
  door.secret = gate->secret_;
  door.tls = links_encrypted();
  door.identity = std::move(identity);
  door.deadline = limits.handshake_timeout;
  door.max_unproven = limits.max_unproven;
  auto server = ConnectionServer::start(
      std::move(*listener), port, [g](Socket& s, const std::string& peer) { g->serve(s, peer); },
      [g](const std::string& peer, const std::string& why) { g->refuse(peer, why); },
      limits.max_connections, std::move(door));
  if (!server) return server.error();
  gate->server_ = std::move(*server);
  return gate;
}

void CafGate::forget_caf() {
  std::lock_guard<std::mutex> lock(caf_mu_);
  inside_ = nullptr;
  on_refused_ = nullptr;
}

void CafGate::refuse(const std::string& peer, const std::string& why) {
  log_.say("troupe: CAF port " + std::to_string(port()) + ": refused " + peer + ": " + why);
  ++refused_;
  std::lock_guard<std::mutex> lock(caf_mu_);
  if (on_refused_) on_refused_();
}

void CafGate::serve(Socket& outside, const std::string& peer) {
  // A member: the door (ConnectionServer) has had its proof.
  core::Expected<Socket> inside = make_error(Errc::unavailable, "the task is ending");
  {
    std::lock_guard<std::mutex> lock(caf_mu_);
    if (inside_) inside = inside_();
  }
  if (!inside) {
    std::fprintf(stderr, "troupe: CAF port %u: %s\n", static_cast<unsigned>(port()),
                 inside.error().message.c_str());
    return;
  }
  relay_link(relays_, outside, *inside, outside, limits_.max_message_bytes,
             [this, peer](const core::Status& st) {
               if (!st) refuse(peer, st.error().message);
             });
}

void CafGate::stop() {
  server_->stop();
  RelayPool::process().close(relays_);
}

void CafGate::drain(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  server_->drain(timeout);
  RelayPool::process().wait_empty(relays_, deadline);
  stop();
}

CafGate::~CafGate() {
  if (server_) stop();
}

size_t CafGate::links() const {
  return server_->members() + RelayPool::process().size(relays_);
}

namespace {

// Every tunnel of the process (the registry itself never destroyed: CAF may dial a tunnel
// until the process ends).
struct Tunnels {
  std::mutex mu;
  // (secret, host, port, dialled)
  struct Tunnel {
    std::unique_ptr<ConnectionServer> server;
    uint64_t relays = 0;  // its group in RelayPool::process()
  };
  std::map<std::tuple<std::string, std::string, uint16_t, std::string>, Tunnel> open;
  // When a tunnel last had the task at (host, port) prove the secret (tunnel_reached).
  std::mutex reached_mu;
  std::map<std::pair<std::string, uint16_t>, std::chrono::steady_clock::time_point> reached;
  std::map<std::pair<std::string, uint16_t>, TunnelFailure> failed;  // under reached_mu
};

Tunnels& tunnels() {
  static auto* t = new Tunnels;
  return *t;
}

RefusalLog& tunnel_log() {
  static auto* log = new RefusalLog;
  return *log;
}

// Handshakes a tunnel has in flight to its address at once. CAF gives up on a link and
// dials again sooner than a busy task's gate answers: each such try, held through its
// whole handshake, sat unproven at the task's gate, and at 128 workers the gates' room
// for twice the job's tasks overflowed (members dropped). Past this many, a new try is
// closed at once and CAF dials again after its back-off; so every process holds at most
// this many unproven connections at any gate, within GateLimits::for_cluster's room.
constexpr int max_tunnel_handshakes = 2;

void serve_tunnel(Socket& inside, const std::string& host, uint16_t port, const std::string& secret,
                  const GateLimits& limits, const std::string& dialled,
                  std::atomic<int>& handshakes, uint64_t relays) {
  const std::string where = host + ":" + std::to_string(port);
  // A try turned away for the ones in flight names the last one that ended too.
  const auto failed = [&](std::string why, bool turned_away = false) {
    auto& t = tunnels();
    std::lock_guard<std::mutex> lock(t.reached_mu);
    auto& f = t.failed[{host, port}];
    if (!turned_away)
      f.ended = why;
    else if (!f.ended.empty())
      why += "; the last to end: " + f.ended;
    f.why = std::move(why);
    f.when = std::chrono::steady_clock::now();
  };
  if (++handshakes > max_tunnel_handshakes) {
    --handshakes;
    failed(std::to_string(max_tunnel_handshakes) + " handshakes already in flight", true);
    return;  // CAF sees the connection close and tries again
  }
  struct Done {
    std::atomic<int>& n;
    bool counted = true;
    void now() {
      if (counted) --n;
      counted = false;
    }
    ~Done() { now(); }
  } done{handshakes};
  auto outside = connect_to(host, port, limits.handshake_timeout);
  if (!outside) {  // not up (yet): CAF sees the connection close and tries again
    failed(outside.error().message);
    return;
  }
  if (auto st =
          authenticate_to(*outside, secret, limits.handshake_timeout, links_encrypted(), dialled);
      !st) {
    // A refusal, or a link that broke before either side proved anything (the task
    // ending, a reset): CAF sees the connection close and tries again either way.
    std::fprintf(stderr, "troupe: CAF link to %s %s: %s\n", where.c_str(),
                 st.error().code == Errc::permission_denied ? "refused" : "broke in its handshake",
                 st.error().message.c_str());
    failed("handshake: " + st.error().message);
    return;
  }
  done.now();
  {
    // The task proved the secret: its process runs (a stopped one's port accepts too).
    auto& t = tunnels();
    std::lock_guard<std::mutex> lock(t.reached_mu);
    t.reached[{host, port}] = std::chrono::steady_clock::now();
  }
  const auto cut = [where](const core::Status& st) {
    if (!st)
      std::fprintf(stderr, "troupe: CAF link to %s cut: %s\n", where.c_str(),
                   st.error().message.c_str());
  };
  relay_link(relays, *outside, inside, inside, limits.max_message_bytes, cut);
}

}  // namespace

core::Expected<uint16_t> tunnel_to(const std::string& host, uint16_t port,
                                   const std::string& secret, GateLimits limits,
                                   const std::string& dialled) {
  auto& t = tunnels();
  std::lock_guard<std::mutex> lock(t.mu);
  auto key = std::make_tuple(secret, host, port, dialled);
  if (auto it = t.open.find(key); it != t.open.end()) return it->second.server->port();
  uint16_t local = 0;
  auto listener = listen_on("127.0.0.1", local);
  if (!listener) return listener.error();
  // The tunnel proves the secret for whoever dials it: only this process's CAF may, which
  // is checked as each connection is accepted, before it costs a thread.
  DoorOptions door;
  door.accept_check = peer_is_this_process;
  const uint64_t relays = RelayPool::process().new_group();
  auto server = ConnectionServer::start(
      std::move(*listener), local,
      [host, port, secret, limits, dialled, relays,
       handshakes = std::make_shared<std::atomic<int>>(0)](Socket& s, const std::string&) {
        serve_tunnel(s, host, port, secret, limits, dialled, *handshakes, relays);
      },
      [host, port](const std::string& peer, const std::string& why) {
        tunnel_log().say("troupe: tunnel to " + host_port_text(host, port) + " refused " + peer +
                         ": " + why);
      },
      limits.max_connections, std::move(door));
  if (!server) return server.error();
  t.open.emplace(std::move(key), Tunnels::Tunnel{std::move(*server), relays});
  return local;
}

std::chrono::steady_clock::time_point tunnel_reached(const std::string& host, uint16_t port) {
  auto& t = tunnels();
  std::lock_guard<std::mutex> lock(t.reached_mu);
  auto it = t.reached.find({host, port});
  return it == t.reached.end() ? std::chrono::steady_clock::time_point{} : it->second;
}

TunnelFailure tunnel_failure(const std::string& host, uint16_t port) {
  auto& t = tunnels();
  std::lock_guard<std::mutex> lock(t.reached_mu);
  auto it = t.failed.find({host, port});
  return it == t.failed.end() ? TunnelFailure{} : it->second;
}

void close_tunnels_to(const std::string& host, uint16_t port) {
  std::vector<Tunnels::Tunnel> closing;
  {
    auto& t = tunnels();
    std::lock_guard<std::mutex> lock(t.mu);
    for (auto it = t.open.begin(); it != t.open.end();) {
      if (std::get<1>(it->first) == host && std::get<2>(it->first) == port) {
        closing.push_back(std::move(it->second));
        it = t.open.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& tunnel : closing) {  // outside the lock: a tunnel to elsewhere may open meanwhile
    tunnel.server->stop();
    RelayPool::process().close(tunnel.relays);
  }
}

core::Expected<HostPort> caf_route(const std::string& host, uint16_t port,
                                   const std::string& dialled) {
  auto secret = cluster_secret_from_env();
  if (!secret) return secret.error();
  if (secret->empty()) return HostPort{host, port};
  GateLimits limits;
  limits.handshake_timeout = link_handshake_timeout();
  auto local = tunnel_to(host, port, *secret, limits, dialled);
  if (!local) return local.error();
  return HostPort{"127.0.0.1", *local};
}

}  // namespace troupe::net
