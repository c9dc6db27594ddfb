#include "net/relay_pool.hpp"

#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <vector>

#include "net/gate.hpp"

namespace troupe::net {

namespace {
constexpr int outside_side = 0, inside_side = 1;
}  // namespace

struct RelayPool::Link {
  struct End {
    Link* link;
    int side;
  };
  Link(uint64_t g, Socket& o, Socket& i, uint32_t max_payload, Ended e)
      : group(g), check(max_payload), ended(std::move(e)) {
    socket[outside_side] = std::move(o);
    socket[inside_side] = std::move(i);
  }
  uint64_t group;
  Socket socket[2];
  End end[2] = {{this, outside_side}, {this, inside_side}};
  // Bytes read from side i that side 1 - i has not taken yet, from waiting_from[i] on.
  std::vector<unsigned char> waiting[2];
  size_t waiting_from[2] = {0, 0};
  uint32_t armed[2] = {0, 0};
  bool registered[2] = {false, false};  // in the epoll set
  // Side i hung up (or failed) while bytes it sent still waited for the other: out of the
  // epoll set, it is read to its end as the other side takes them (drain_hung_up), and
  // the other side is not read meanwhile (there is nobody left to take its bytes).
  bool hung_up[2] = {false, false};
  BaspFrameCheck check;
  Ended ended;
  core::Status ended_status;
  // Relaying ended: each side still open has been sent a FIN after its queued bytes and is
  // read (and what comes dropped) until the peer closes too, at most until linger_until:
  // closed with unread bytes, a socket would reset, and the peer could lose the last ones.
  bool lingering = false;
  std::chrono::steady_clock::time_point linger_until{};
  bool gone = false;  // both sides closed: freed after this batch of events
};

namespace {
// How long an ended link's sockets wait for their peers to close after the FIN.
constexpr auto linger_time = std::chrono::seconds(2);
}  // namespace

RelayPool& RelayPool::process() {
  static auto* pool = new RelayPool;
  return *pool;
}

uint64_t RelayPool::new_group() {
  std::lock_guard<std::mutex> lock(mu_);
  return next_group_++;
}

bool RelayPool::start() {  // under mu_
  if (started_ || failed_) return started_;
  epoll_ = ::epoll_create1(EPOLL_CLOEXEC);
  if (epoll_ >= 0) {
    try {
      thread_ = std::thread([this] { run(); });
      started_ = true;
      return true;
    } catch (const std::system_error&) {
      ::close(epoll_);
      epoll_ = -1;
    }
  }
  // Said once; every link then keeps a thread of its own.
  std::fprintf(stderr, "troupe: no thread for the relay pool: each CAF link relays on its own\n");
  failed_ = true;
  return false;
}

bool RelayPool::available() {
  std::lock_guard<std::mutex> lock(mu_);
  return start();
}

bool RelayPool::add(uint64_t group, Socket& outside, Socket& inside, uint32_t max_payload,
                    Ended ended) {
  // Under mu_ throughout: the pool's thread handles events under it too, so it sees the
  // link only once both sockets are in.
  std::lock_guard<std::mutex> lock(mu_);
  if (!start()) return false;
  auto link = std::make_unique<Link>(group, outside, inside, max_payload, std::move(ended));
  Link& l = *link;
  for (int side : {outside_side, inside_side}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.ptr = &l.end[side];
    if (::epoll_ctl(epoll_, EPOLL_CTL_ADD, l.socket[side].fd(), &ev) != 0) {
      if (side == outside_side) {  // nothing of it registered: the caller relays
        outside = std::move(l.socket[outside_side]);
        inside = std::move(l.socket[inside_side]);
        return false;
      }
      // The outside is in the set (an event for it may already be out): the link ends
      // as any other, its sockets shut down.
      l.socket[outside_side].shutdown();
      l.socket[inside_side].shutdown();
      break;
    }
    l.armed[side] = EPOLLIN;
    l.registered[side] = true;
  }
  ++open_[group];
  links_.emplace(&l, std::move(link));
  return true;
}

size_t RelayPool::size(uint64_t group) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = open_.find(group);
  return it == open_.end() ? 0 : it->second;
}

bool RelayPool::wait_empty(uint64_t group, std::chrono::steady_clock::time_point deadline) const {
  std::unique_lock<std::mutex> lock(mu_);
  return changed_.wait_until(lock, deadline, [&] {
    auto it = open_.find(group);
    return it == open_.end() || it->second == 0;
  });
}

void RelayPool::close(uint64_t group) {
  std::unique_lock<std::mutex> lock(mu_);
  // Shut down, not closed: the pool's thread still holds the descriptors, and sees them
  // hang up.
  for (auto& [ptr, link] : links_)
    if (link->group == group)
      for (auto& s : link->socket)
        s.shutdown();
  changed_.wait(lock, [&] {
    auto it = open_.find(group);
    return it == open_.end() || it->second == 0;
  });
  open_.erase(group);
}

void RelayPool::unregister(Link& l, int side) {
  if (!l.registered[side]) return;
  ::epoll_ctl(epoll_, EPOLL_CTL_DEL, l.socket[side].fd(), nullptr);
  l.registered[side] = false;
}

void RelayPool::arm(Link& l) {
  for (int side : {outside_side, inside_side}) {
    if (!l.registered[side]) continue;
    // Read a side while what it sent before has all been taken (and someone is left to
    // take more); watch a side for room while bytes wait for it.
    uint32_t want = 0;
    if (l.lingering || (l.waiting[side].empty() && !l.hung_up[1 - side])) want |= EPOLLIN;
    if (!l.lingering && !l.waiting[1 - side].empty()) want |= EPOLLOUT;
    if (want == l.armed[side]) continue;
    epoll_event ev{};
    ev.events = want;
    ev.data.ptr = &l.end[side];
    ::epoll_ctl(epoll_, EPOLL_CTL_MOD, l.socket[side].fd(), &ev);
    l.armed[side] = want;
  }
}

bool RelayPool::flush(Link& l, int to) {
  auto& w = l.waiting[1 - to];
  auto& from = l.waiting_from[1 - to];
  while (from < w.size()) {
    const ssize_t n =
        ::send(l.socket[to].fd(), w.data() + from, w.size() - from, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    if (n <= 0) return false;
    from += static_cast<size_t>(n);
  }
  w.clear();
  from = 0;
  return true;
}

bool RelayPool::peer_gone(Link& l, int x, core::Status& why) {
  if (l.hung_up[1 - x]) return false;  // both gone: nothing more can be delivered
  // Side x hung up or takes no more: nothing can reach it now, but what it sent still goes
  // to the other side, then what it still holds, as a relay thread's blocking send did
  // (CAF's last words, the shutdown acknowledgement among them). Out of the epoll set
  // meanwhile, or its hang-up would fire again and again; the other side is not read.
  unregister(l, x);
  l.hung_up[x] = true;
  l.waiting[1 - x].clear();
  l.waiting_from[1 - x] = 0;
  return l.waiting[x].empty() ? drain_hung_up(l, x, why) : true;
}

bool RelayPool::drain_hung_up(Link& l, int from, core::Status& why) {
  // Out of the epoll set: read what it still holds until its end, or until the other
  // side cannot take more (then the other side's room calls this again).
  while (l.waiting[from].empty()) {
    bool read = false;
    if (!pump(l, from, why, &read)) return false;
    if (!read) return false;  // hung up, yet nothing to read and no end: give up on it
  }
  return true;
}

bool RelayPool::pump(Link& l, int from, core::Status& why, bool* read) {
  thread_local std::vector<unsigned char> buf(64 << 10);
  const int to = 1 - from;
  ssize_t r;
  do {
    r = ::recv(l.socket[from].fd(), buf.data(), buf.size(), MSG_DONTWAIT);
  } while (r < 0 && errno == EINTR);
  if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
  if (r <= 0) return false;
  if (read != nullptr) *read = true;
  const auto n = static_cast<size_t>(r);
  if (from == outside_side)
    if (auto st = l.check.feed(buf.data(), n); !st) {
      why = st;
      return false;
    }
  // Straight on to the other side; what it cannot take now waits in the link.
  size_t sent = 0;
  while (sent < n) {
    const ssize_t w =
        ::send(l.socket[to].fd(), buf.data() + sent, n - sent, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (w <= 0) return peer_gone(l, to, why);  // what it read is for nobody now
    sent += static_cast<size_t>(w);
  }
  if (sent < n) l.waiting[from].assign(buf.begin() + sent, buf.begin() + n);
  return true;
}

bool RelayPool::relay_event(Link& l, int side, uint32_t ev, core::Status& why) {
  const int other = 1 - side;
  if (ev & EPOLLOUT) {
    if (!flush(l, side)) return peer_gone(l, side, why);
    if (l.hung_up[other] && l.waiting[other].empty() && !drain_hung_up(l, other, why)) return false;
  }
  if (!(ev & (EPOLLIN | EPOLLHUP | EPOLLERR))) return true;
  if (l.hung_up[other]) return !(ev & (EPOLLHUP | EPOLLERR));  // its taker is gone too
  if (l.waiting[side].empty()) return pump(l, side, why);
  return peer_gone(l, side, why);  // hung up (or failed) while its bytes still wait
}

void RelayPool::linger_event(Link& l, int side) {
  thread_local std::vector<unsigned char> sink(16 << 10);
  for (;;) {
    const ssize_t r = ::recv(l.socket[side].fd(), sink.data(), sink.size(), MSG_DONTWAIT);
    if (r > 0) continue;
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    break;  // the peer closed too (or the socket failed): done with this side
  }
  unregister(l, side);
  l.socket[side].close();
}

void RelayPool::end_relaying(Link& l, std::vector<Ending>& ending) {
  ending.push_back({std::move(l.ended), std::move(l.ended_status), l.group});
  l.lingering = true;
  l.linger_until = std::chrono::steady_clock::now() + linger_time;
  for (int side : {outside_side, inside_side}) {
    if (!l.registered[side]) {
      l.socket[side].close();  // hung up: nobody there to lose anything
      continue;
    }
    ::shutdown(l.socket[side].fd(), SHUT_WR);  // a FIN after what is queued
  }
  arm(l);
  lingering_.push_back(&l);
}

void RelayPool::run() {
  std::vector<epoll_event> events(256);
  std::vector<Ending> ending;
  for (;;) {
    int timeout_ms = -1;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!lingering_.empty()) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            lingering_.front()->linger_until - std::chrono::steady_clock::now());
        timeout_ms = static_cast<int>(std::max<int64_t>(0, left.count() + 1));
      }
    }
    const int n = ::epoll_wait(epoll_, events.data(), static_cast<int>(events.size()), timeout_ms);
    if (n < 0 && errno != EINTR) {
      std::fprintf(stderr, "troupe: the relay pool's epoll_wait failed (errno %d)\n", errno);
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (int i = 0; i < n; ++i) {
        auto* end = static_cast<Link::End*>(events[i].data.ptr);
        Link& l = *end->link;
        if (l.gone || !l.registered[end->side]) continue;  // done with earlier in this batch
        if (l.lingering) {
          linger_event(l, end->side);
        } else {
          core::Status why;
          if (relay_event(l, end->side, events[i].events, why)) {
            arm(l);
          } else {
            l.ended_status = std::move(why);
            end_relaying(l, ending);
          }
        }
        if (l.lingering && !l.registered[outside_side] && !l.registered[inside_side]) l.gone = true;
      }
      // Lingered long enough: closed as they are.
      const auto now = std::chrono::steady_clock::now();
      while (!lingering_.empty() &&
             (lingering_.front()->gone || lingering_.front()->linger_until <= now)) {
        Link* l = lingering_.front();
        lingering_.pop_front();
        for (int side : {outside_side, inside_side})
          unregister(*l, side);
        links_.erase(l);  // closes what is still open
      }
    }
    // Outside the lock: `ended` may take locks of its own (a gate's refusal count).
    for (auto& e : ending) {
      if (e.ended) e.ended(std::move(e.status));
      std::lock_guard<std::mutex> lock(mu_);
      --open_[e.group];
    }
    if (!ending.empty()) changed_.notify_all();
    ending.clear();
  }
}

}  // namespace troupe::net
