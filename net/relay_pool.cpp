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
  BaspFrameCheck check;
  Ended ended;
  core::Status ended_status;
  bool done = false;
  // A side that hung up while bytes it sent still waited for the other: out of the epoll
  // set, it is read to its end as the other side takes them (drain_hung_up).
  bool removed[2] = {false, false};
};

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

bool RelayPool::add(uint64_t group, Socket& outside, Socket& inside, uint32_t max_payload,
                    Ended ended) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!start()) return false;
  auto link = std::make_unique<Link>(group, outside, inside, max_payload, std::move(ended));
  Link& l = *link;
  for (int side : {outside_side, inside_side}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.ptr = &l.end[side];
    if (::epoll_ctl(epoll_, EPOLL_CTL_ADD, l.socket[side].fd(), &ev) != 0) {
      if (side == inside_side)
        ::epoll_ctl(epoll_, EPOLL_CTL_DEL, l.socket[outside_side].fd(), nullptr);
      outside = std::move(l.socket[outside_side]);
      inside = std::move(l.socket[inside_side]);
      return false;
    }
    l.armed[side] = EPOLLIN;
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

void RelayPool::arm(Link& l) {
  for (int side : {outside_side, inside_side}) {
    if (l.removed[side]) continue;
    // Read a side while what it sent before has all been taken; watch a side for room
    // while bytes wait for it.
    uint32_t want = 0;
    if (l.waiting[side].empty()) want |= EPOLLIN;
    if (!l.waiting[1 - side].empty()) want |= EPOLLOUT;
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
    if (w <= 0) return false;
    sent += static_cast<size_t>(w);
  }
  if (sent < n) l.waiting[from].assign(buf.begin() + sent, buf.begin() + n);
  return true;
}

void RelayPool::run() {
  std::vector<epoll_event> events(256);
  std::vector<Link*> ending;
  for (;;) {
    const int n = ::epoll_wait(epoll_, events.data(), static_cast<int>(events.size()), -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      std::fprintf(stderr, "troupe: the relay pool's epoll_wait failed (errno %d)\n", errno);
      return;
    }
    for (int i = 0; i < n; ++i) {
      auto* end = static_cast<Link::End*>(events[i].data.ptr);
      Link& l = *end->link;
      if (l.done) continue;  // ended by an earlier event of this batch
      const uint32_t ev = events[i].events;
      core::Status why;
      bool ok = true;
      if (ev & EPOLLOUT) {
        ok = flush(l, end->side);
        if (ok && l.removed[1 - end->side] && l.waiting[1 - end->side].empty())
          ok = drain_hung_up(l, 1 - end->side, why);
      }
      if (ok && (ev & (EPOLLIN | EPOLLHUP | EPOLLERR))) {
        if (l.waiting[end->side].empty()) {
          ok = pump(l, end->side, why);
        } else if (ev & EPOLLERR) {
          ok = false;
        } else if (ev & EPOLLHUP) {
          // Hung up with bytes still waiting for the other side (CAF's last words, the
          // shutdown acknowledgement among them): they go out first, as on a relay
          // thread. Out of the set meanwhile, or its hang-up would fire again and again.
          ::epoll_ctl(epoll_, EPOLL_CTL_DEL, l.socket[end->side].fd(), nullptr);
          l.removed[end->side] = true;
        }
      }
      if (ok) {
        arm(l);
      } else {
        l.done = true;
        l.ended_status = std::move(why);
        ending.push_back(&l);
      }
    }
    for (Link* l : ending) {
      for (auto& s : l->socket)
        ::epoll_ctl(epoll_, EPOLL_CTL_DEL, s.fd(), nullptr);
      std::unique_ptr<Link> gone;
      {
        std::lock_guard<std::mutex> lock(mu_);
        auto it = links_.find(l);
        gone = std::move(it->second);
        links_.erase(it);
      }
      for (auto& s : gone->socket)
        s.close();  // either side sees the other go
      if (gone->ended) gone->ended(std::move(gone->ended_status));
      {
        std::lock_guard<std::mutex> lock(mu_);
        --open_[gone->group];
      }
      changed_.notify_all();
    }
    ending.clear();
  }
}

}  // namespace troupe::net
