#include "net/request_pool.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <system_error>
#include <utility>

#include "net/tls.hpp"

namespace troupe::net {

using clock = std::chrono::steady_clock;

core::Expected<std::unique_ptr<RequestPool>> RequestPool::start(Handler handler, Options options,
                                                                Closed closed) {
  std::unique_ptr<RequestPool> pool(
      new RequestPool(std::move(handler), std::move(options), std::move(closed)));
  pool->epoll_ = ::epoll_create1(EPOLL_CLOEXEC);
  if (pool->epoll_ < 0 || ::pipe2(pool->wake_, O_CLOEXEC | O_NONBLOCK) != 0)
    return core::make_error(core::Errc::io_error, "request pool: cannot create its epoll set");
  epoll_event ev{};
  ev.events = EPOLLIN;  // level-triggered: once stopped, every thread's wait returns
  ev.data.u64 = 0;
  if (::epoll_ctl(pool->epoll_, EPOLL_CTL_ADD, pool->wake_[0], &ev) != 0)
    return core::make_error(core::Errc::io_error, "request pool: cannot watch its pipe");
  try {
    std::lock_guard<std::mutex> lock(pool->mu_);
    for (size_t i = 0; i < pool->options_.threads; ++i)
      pool->workers_.emplace_back([p = pool.get()] { p->run_loop(); });
    pool->watchdog_ = std::thread([p = pool.get()] { p->watch_loop(); });
  } catch (const std::system_error& e) {
    pool->stop();
    return core::make_error(core::Errc::unavailable,
                            std::string("request pool: no thread (") + e.what() + ")");
  }
  return pool;
}

RequestPool::RequestPool(Handler handler, Options options, Closed closed)
    : handler_(std::move(handler)), options_(options), closed_(std::move(closed)) {
  options_.threads = std::max<size_t>(1, options_.threads);
  options_.max_threads = std::max(options_.threads, options_.max_threads);
}

RequestPool::~RequestPool() {
  stop();
  for (int fd : {wake_[0], wake_[1], epoll_})
    if (fd >= 0) ::close(fd);
}

void RequestPool::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) return;
    stopped_ = true;
    for (auto& [id, m] : members_)
      m.socket.shutdown();  // a handler reading it returns
  }
  if (wake_[1] >= 0) {
    const char byte = 1;
    [[maybe_unused]] ssize_t w = ::write(wake_[1], &byte, 1);
  }
  watch_cv_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
  for (auto& t : workers_)  // no thread is added once stopped
    if (t.joinable()) t.join();
  std::lock_guard<std::mutex> lock(mu_);
  members_.clear();
  empty_cv_.notify_all();
}

bool RequestPool::arm_locked(uint64_t id, const Member& m, bool first) {
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP | EPOLLONESHOT;
  ev.data.u64 = id;
  // Re-arming fails only for a descriptor already closed: its turn then never comes, and
  // the member stays until it idles out or the pool stops.
  return ::epoll_ctl(epoll_, first ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, m.socket.fd(), &ev) == 0;
}

bool RequestPool::add(Socket s, std::string peer, std::string tls_key) {
  std::unique_lock<std::mutex> lock(mu_);
  if (stopped_) return false;
  const uint64_t id = next_id_++;
  Member& m = members_[id];
  m.socket = std::move(s);
  m.peer = std::move(peer);
  m.tls_key = std::move(tls_key);
  m.last = clock::now();
  if (arm_locked(id, m, /*first=*/true)) return true;
  // Not watched (the epoll set's limit, out of memory): closed now, not held unserved.
  const std::string why = std::string("cannot watch it: ") + std::strerror(errno);
  const std::string who = m.peer;
  members_.erase(id);
  lock.unlock();
  if (closed_) closed_(who, Ended::failed, why);
  return true;
}

size_t RequestPool::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return members_.size();
}

size_t RequestPool::threads() const {
  std::lock_guard<std::mutex> lock(mu_);
  return workers_.size();
}

bool RequestPool::wait_empty(clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  return empty_cv_.wait_until(lock, deadline, [this] { return members_.empty(); });
}

void RequestPool::grow_locked() {
  if (stopped_ || workers_.size() >= options_.max_threads) return;
  try {
    workers_.emplace_back([this] { run_loop(); });
  } catch (const std::system_error&) {
    // Out of threads: the requests wait for the threads there are.
  }
}

void RequestPool::run_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    if (stopped_) return;
    ++idle_threads_;
    lock.unlock();
    epoll_event ev{};
    const int n = ::epoll_wait(epoll_, &ev, 1, -1);
    lock.lock();
    --idle_threads_;
    if (stopped_) return;
    // A copy: epoll_event is packed, its u64 not aligned for a reference (find's).
    const uint64_t id = ev.data.u64;
    if (n <= 0 || id == 0) continue;
    auto it = members_.find(id);
    if (it == members_.end() || it->second.busy) continue;  // closed for idling meanwhile
    it->second.busy = true;
    if (all_held_locked()) watch_cv_.notify_one();
    serve_locked(id, lock);
  }
}

void RequestPool::serve_locked(uint64_t id, std::unique_lock<std::mutex>& lock) {
  Member& m = members_.at(id);  // stays: only its busy thread (or stop) erases it
  for (;;) {
    const std::string key = std::exchange(m.tls_key, std::string());
    lock.unlock();
    bool more = true;
    Ended ended = Ended::failed;
    std::string why;
    if (!key.empty()) {  // its first turn: the TLS handshake, then back to the wait
      if (auto st = start_tls(m.socket, /*server=*/true, key, options_.tls_deadline); !st) {
        more = false;
        ended = Ended::tls;
        why = st.error().message;
      }
    } else {
      try {
        more = handler_(m.socket, m.peer);
      } catch (const std::exception& e) {
        more = false;
        why = e.what();
      } catch (...) {
        more = false;
        why = "an unknown exception";
      }
    }
    if (!more) m.socket.shutdown();  // the peer sees the end now
    const std::string peer = more || why.empty() ? std::string() : m.peer;
    const bool tls_pending = more && buffered(m.socket) > 0;
    lock.lock();
    ++served_;
    if (stopped_) return;  // stop() closes the members
    if (!more) {
      members_.erase(id);  // its descriptor closes, and leaves the epoll set
      if (members_.empty()) empty_cv_.notify_all();
      if (!peer.empty() && closed_) {
        lock.unlock();
        closed_(peer, ended, why);
        lock.lock();
      }
      return;
    }
    m.last = clock::now();
    if (tls_pending) continue;  // TLS bytes epoll cannot see: served again at once
    m.busy = false;
    arm_locked(id, m, /*first=*/false);
    return;
  }
}

void RequestPool::close_idle_locked(std::unique_lock<std::mutex>& lock) {
  const auto now = clock::now();
  std::vector<std::pair<uint64_t, Ended>> expired;
  for (auto& [id, m] : members_) {
    if (m.busy) continue;
    // A member still owing its TLS handshake has the door's deadline for it, counted from
    // its admission as on a thread of its own; the others, the idle timeout.
    const bool tls = !m.tls_key.empty();
    const auto bound = tls ? options_.tls_deadline : options_.idle_timeout;
    if (bound.count() <= 0 || now - m.last < bound) continue;
    // A request that arrived while every thread was held is no idleness.
    pollfd p{m.socket.fd(), POLLIN, 0};
    if (!tls && (::poll(&p, 1, 0) > 0 || buffered(m.socket) > 0)) continue;
    m.busy = true;  // a thread that has its event now leaves it alone
    (void)::epoll_ctl(epoll_, EPOLL_CTL_DEL, m.socket.fd(), nullptr);
    expired.emplace_back(id, tls ? Ended::tls : Ended::idle);
  }
  for (const auto& [id, ended] : expired) {
    Member& m = members_.at(id);
    const std::string peer = m.peer;
    const std::string why =
        ended == Ended::tls
            ? "no TLS handshake within " + std::to_string(options_.tls_deadline.count()) + " ms"
            : "idle for " + std::to_string(options_.idle_timeout.count()) + " ms";
    lock.unlock();
    // On this thread, which grows the pool: the farewell's writes may not hold it long.
    if (ended == Ended::idle && options_.farewell) {
      set_io_timeout(m.socket, std::chrono::milliseconds(100));
      options_.farewell(m.socket, peer);
    }
    m.socket.shutdown();
    if (closed_) closed_(peer, ended, why);
    lock.lock();
    if (stopped_) return;
    members_.erase(id);
  }
  if (!expired.empty() && members_.empty()) empty_cv_.notify_all();
}

void RequestPool::watch_loop() {
  // Idle members (and TLS handshakes not begun) are looked for a few times per bound, at
  // least each second.
  auto every = [](std::chrono::milliseconds bound) {
    return std::clamp<std::chrono::milliseconds>(bound / 4, std::chrono::milliseconds(1),
                                                 std::chrono::milliseconds(1000));
  };
  auto idle_every = options_.idle_timeout.count() > 0 ? every(options_.idle_timeout)
                                                      : std::chrono::milliseconds(0);
  if (options_.tls_deadline.count() > 0)
    idle_every = idle_every.count() > 0 ? std::min(idle_every, every(options_.tls_deadline))
                                        : every(options_.tls_deadline);
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopped_) {
    if (all_held_locked()) {
      // Every thread serves: one more once none has ended a turn for grow_after.
      const uint64_t seen = served_;
      watch_cv_.wait_for(lock, options_.grow_after, [this] { return stopped_; });
      if (stopped_) return;
      if (all_held_locked() && served_ == seen) grow_locked();
    } else if (idle_every.count() > 0) {
      watch_cv_.wait_for(lock, idle_every, [this] { return stopped_ || all_held_locked(); });
    } else {
      watch_cv_.wait(lock, [this] { return stopped_ || all_held_locked(); });
    }
    if (!stopped_) close_idle_locked(lock);
  }
}

}  // namespace troupe::net
