#include "net/connection_server.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <system_error>
#include <vector>

#include "net/auth.hpp"
#include "net/tls.hpp"

namespace troupe::net {

core::Expected<std::unique_ptr<ConnectionServer>> ConnectionServer::start(
    Socket listener, uint16_t port, Handler handler, Refused refused, size_t max_connections,
    DoorOptions door) {
  return launch(std::move(listener), port, std::move(handler), {}, std::move(refused),
                max_connections, std::move(door), nullptr);
}

core::Expected<std::unique_ptr<ConnectionServer>> ConnectionServer::start_pooled(
    Socket listener, uint16_t port, RequestPool::Handler handler, Refused refused,
    size_t max_connections, DoorOptions door, RequestPool::Options pool) {
  pool.tls_deadline = door.deadline;
  return launch(std::move(listener), port, nullptr, std::move(handler), std::move(refused),
                max_connections, std::move(door), &pool);
}

core::Expected<std::unique_ptr<ConnectionServer>> ConnectionServer::launch(
    Socket listener, uint16_t port, Handler handler, RequestPool::Handler request_handler,
    Refused refused, size_t max_connections, DoorOptions door, const RequestPool::Options* pool) {
  // Never blocks the acceptor: a peer that gives up between poll() and accept() is EAGAIN.
  const int flags = ::fcntl(listener.fd(), F_GETFL);
  if (flags < 0 || ::fcntl(listener.fd(), F_SETFL, flags | O_NONBLOCK) != 0)
    return core::make_error(core::Errc::io_error, "listener on port " + std::to_string(port) +
                                                      ": cannot make it non-blocking");
  std::unique_ptr<ConnectionServer> server(
      new ConnectionServer(std::move(listener), port, std::move(handler), std::move(refused),
                           max_connections, std::move(door)));
  if (pool != nullptr) {
    auto made = RequestPool::start(
        std::move(request_handler), *pool,
        [s = server.get()](const std::string& peer, RequestPool::Ended why,
                           const std::string& text) { s->pool_closed(peer, why, text); });
    if (!made) return made.error();
    server->pool_ = std::move(*made);
  }
  if (::pipe2(server->wake_, O_CLOEXEC) != 0)
    return core::make_error(core::Errc::io_error,
                            "listener on port " + std::to_string(port) + ": cannot create a pipe");
  server->acceptor_ = std::thread([s = server.get()] { s->supervise(); });
  return server;
}

void ConnectionServer::pool_closed(const std::string& peer, RequestPool::Ended why,
                                   const std::string& text) {
  switch (why) {
    case RequestPool::Ended::tls:  // as the threaded door's failed TLS handshake: refused
      if (refused_) refused_(peer, text);
      break;
    case RequestPool::Ended::idle:  // the handler's farewell said so; a flood of these
      break;                        // would crowd real trouble out of its log
    case RequestPool::Ended::failed:
      trouble("serving " + peer + " failed (" + text + "): closed");
      break;
  }
}

size_t ConnectionServer::members() const {
  if (pool_) return pool_->size();
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<size_t>(std::count_if(connections_.begin(), connections_.end(),
                                           [](const Connection& c) { return !c.finished; }));
}

size_t ConnectionServer::serving_threads() const {
  if (pool_) return pool_->threads();
  return members();
}

ConnectionServer::ConnectionServer(Socket listener, uint16_t port, Handler handler, Refused refused,
                                   size_t max_connections, DoorOptions door)
    : listener_(std::move(listener)),
      port_(port),
      handler_(std::move(handler)),
      refused_(std::move(refused)),
      max_connections_(std::max<size_t>(1, max_connections)),
      door_(std::move(door)) {
  door_.max_unproven = std::max<size_t>(1, door_.max_unproven);
}

ConnectionServer::~ConnectionServer() {
  stop();
  for (int fd : wake_)
    if (fd >= 0) ::close(fd);
}

void ConnectionServer::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) return;
    stopped_ = true;
    for (auto& c : connections_)
      c.socket.shutdown();
  }
  stop_accepting();
  // No new connection can appear now: join every one.
  for (auto& c : connections_)
    if (c.thread.joinable()) c.thread.join();
  if (pool_) pool_->stop();
}

void ConnectionServer::stop_accepting() {
  if (wake_[1] >= 0) {
    const char byte = 1;
    [[maybe_unused]] ssize_t w = ::write(wake_[1], &byte, 1);
  }
  if (acceptor_.joinable()) acceptor_.join();
}

void ConnectionServer::drain(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) return;
  }
  stop_accepting();
  listener_.close();  // a peer dialling now is refused, not left in the backlog
  if (pool_) {
    pool_->wait_empty(deadline);
  } else {
    std::unique_lock<std::mutex> lock(mu_);
    ended_.wait_until(lock, deadline, [this] {
      return std::all_of(connections_.begin(), connections_.end(),
                         [](const Connection& c) { return c.finished.load(); });
    });
  }
  stop();
}

void RefusalLog::say(const std::string& line) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto now = std::chrono::steady_clock::now();
  if (now - window_ >= period_) {
    window_ = now;
    shown_ = 0;
  }
  if (shown_ >= burst_) {
    ++held_;
    ++held_total_;
    return;
  }
  ++shown_;
  if (held_ > 0) {
    std::fprintf(stderr, "%s (and %llu more refused, not shown)\n", line.c_str(),
                 static_cast<unsigned long long>(held_));
    held_ = 0;
  } else {
    std::fprintf(stderr, "%s\n", line.c_str());
  }
}

uint64_t RefusalLog::suppressed_total() const {
  std::lock_guard<std::mutex> lock(mu_);
  return held_total_;
}

namespace {
// The server whose member this thread serves (keep() takes its lock).
thread_local ConnectionServer* serving = nullptr;
}  // namespace

Socket ConnectionServer::keep(Socket& s) {
  if (serving == nullptr) return std::move(s);
  std::lock_guard<std::mutex> lock(serving->mu_);
  return std::move(s);
}

struct ConnectionServer::Unproven {
  Socket socket;
  std::string peer;
  Admission admission;
  std::chrono::steady_clock::time_point deadline;
};

void ConnectionServer::trouble(const std::string& what) {
  trouble_log_.say("troupe: port " + std::to_string(port_) + ": " + what);
}

void ConnectionServer::supervise() {
  using clock = std::chrono::steady_clock;
  auto backoff = std::chrono::milliseconds(50);
  for (;;) {
    const auto started = clock::now();
    std::string why;
    try {
      accept_loop();
      return;  // stopped
    } catch (const std::exception& e) {
      why = e.what();
    } catch (...) {
      why = "an unknown exception";
    }
    // The unproven connections it held are gone with it (they may dial again); members
    // are untouched. A loop that ran a while before it failed starts again soon.
    if (clock::now() - started > std::chrono::seconds(10)) backoff = std::chrono::milliseconds(50);
    trouble("its acceptor failed (" + why + "); started again in " +
            std::to_string(backoff.count()) + " ms");
    pollfd wake{wake_[0], POLLIN, 0};
    if (::poll(&wake, 1, static_cast<int>(backoff.count())) > 0) return;  // stopped meanwhile
    backoff = std::min<std::chrono::milliseconds>(backoff * 2, std::chrono::seconds(5));
  }
}

void ConnectionServer::accept_loop() {
  using clock = std::chrono::steady_clock;
  const bool door = !door_.secret.empty();
  std::list<Unproven> unproven;  // oldest first
  std::vector<pollfd> fds;
  std::vector<std::list<Unproven>::iterator> polled;
  auto refuse = [&](const std::string& peer, const std::string& why) {
    if (refused_) refused_(peer, why);
  };
  // Out of descriptors or memory, the listener is left alone until then: still readable,
  // it would have the loop spin.
  clock::time_point accept_paused_until{};
  for (;;) {
    // Each unproven connection has until its deadline, counted from accept.
    const auto now = clock::now();
    int wait_ms = -1;
    const bool accepting = now >= accept_paused_until;
    if (!accepting)
      wait_ms = static_cast<int>(
          std::chrono::duration_cast<std::chrono::milliseconds>(accept_paused_until - now).count() +
          1);
    for (auto it = unproven.begin(); it != unproven.end();) {
      if (it->deadline <= now) {
        refuse(it->peer, "no whole proof of membership within " +
                             std::to_string(door_.deadline.count()) + " ms of accept");
        it = unproven.erase(it);
        continue;
      }
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(it->deadline - now).count() + 1;
      wait_ms = wait_ms < 0 ? static_cast<int>(left) : std::min(wait_ms, static_cast<int>(left));
      ++it;
    }
    fds.assign({{accepting ? listener_.fd() : -1, POLLIN, 0}, {wake_[0], POLLIN, 0}});
    polled.clear();
    for (auto it = unproven.begin(); it != unproven.end(); ++it) {
      fds.push_back({it->socket.fd(), POLLIN, 0});
      polled.push_back(it);
    }
    if (::poll(fds.data(), fds.size(), wait_ms) < 0) {
      if (errno == EINTR) continue;
      throw std::system_error(errno, std::generic_category(), "poll");
    }
    if (fds[1].revents != 0) return;
    // What the unproven sent, as it comes: never more than the rest of its hello.
    for (size_t i = 2; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      auto it = polled[i - 2];
      char buf[128];
      const size_t want = std::min(sizeof buf, it->admission.wanted());
      const ssize_t n = ::recv(it->socket.fd(), buf, want, MSG_DONTWAIT);
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (n <= 0) {
        refuse(it->peer, n == 0 ? "closed during the handshake"
                                : std::string("handshake: ") + std::strerror(errno));
        unproven.erase(it);
        continue;
      }
      const auto step = it->admission.feed(buf, static_cast<size_t>(n));
      if (step == Admission::Step::more) continue;
      if (step == Admission::Step::refused) {
        refuse(it->peer, it->admission.refusal().message);
        unproven.erase(it);
        continue;
      }
      // Proven: the answer is 32 bytes on a socket that has sent 36, so it fits at once.
      const std::string& answer = it->admission.answer();
      if (::send(it->socket.fd(), answer.data(), answer.size(), MSG_DONTWAIT | MSG_NOSIGNAL) !=
          static_cast<ssize_t>(answer.size())) {
        refuse(it->peer, "cannot send the server's proof");
        unproven.erase(it);
        continue;
      }
      Socket member = std::move(it->socket);
      std::string peer = std::move(it->peer);
      std::string key = it->admission.tls_key();
      unproven.erase(it);
      if (!admit(std::move(member), std::move(peer), std::move(key))) return;
    }
    if (fds[0].revents == 0) continue;
    // Every connection waiting in the backlog, up to a batch: at a job's start hundreds of
    // members dial at once, and one accept per wake-up of this thread (scheduled rarely on
    // a crowded host) left some unanswered past their dialler's wait for the challenge.
    for (int batch = 0; batch < 256; ++batch) {
      if (batch > 0) {
        pollfd more{listener_.fd(), POLLIN, 0};
        if (::poll(&more, 1, 0) <= 0) break;
      }
      std::string peer;
      auto s = accept_on(listener_, peer);
      if (!s) {
        if (s.error().code == core::Errc::io_error) {  // not the peer's doing: wait
          trouble(s.error().message + ": not accepting for 100 ms");
          accept_paused_until = clock::now() + std::chrono::milliseconds(100);
          break;
        }
        continue;  // else the peer gave up before we accepted it
      }
      if (door_.accept_check) {
        if (auto st = door_.accept_check(*s); !st) {
          if (st.error().code != core::Errc::cancelled) refuse(peer, st.error().message);
          continue;
        }
      }
      if (!door) {
        if (!admit(std::move(*s), std::move(peer), {})) return;
        continue;
      }
      auto a = Admission::make(door_.secret, door_.tls, door_.identity);
      if (!a) {
        refuse(peer, a.error().message);
        continue;
      }
      const std::string& challenge = a->challenge();
      if (::send(s->fd(), challenge.data(), challenge.size(), MSG_DONTWAIT | MSG_NOSIGNAL) !=
          static_cast<ssize_t>(challenge.size())) {
        refuse(peer, "cannot send the challenge");
        continue;
      }
      unproven.push_back(
          Unproven{std::move(*s), std::move(peer), std::move(*a), clock::now() + door_.deadline});
      if (unproven.size() > door_.max_unproven) {
        refuse(unproven.front().peer, std::to_string(door_.max_unproven) +
                                          " unproven connections held: the oldest is dropped");
        unproven.pop_front();
      }
    }
  }
}

void ConnectionServer::reap() {
  for (auto it = connections_.begin(); it != connections_.end();) {
    if (it->finished) {
      it->thread.join();
      it = connections_.erase(it);
    } else {
      ++it;
    }
  }
}

bool ConnectionServer::admit(Socket s, std::string peer, std::string tls_key) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stopped_) return false;
  // Reap members whose peer has gone, so a reconnecting peer does not pile up threads.
  reap();
  // Bounded: past the cap a member is closed at once, before it costs a thread.
  const size_t open = pool_ ? pool_->size() : connections_.size();
  if (open >= max_connections_) {
    if (refused_) refused_(peer, std::to_string(open) + " connections already open");
    return true;  // `s` closes here
  }
  if (pool_) return pool_->add(std::move(s), std::move(peer), std::move(tls_key));
  auto& c = connections_.emplace_back();
  c.socket = std::move(s);
  c.peer = std::move(peer);
  try {
    c.thread = std::thread([this, &c, key = std::move(tls_key)] { serve_member(c, key); });
  } catch (const std::system_error& e) {  // out of threads: this member is closed, not the door
    trouble("no thread for " + c.peer + " (" + e.what() + "): closed");
    connections_.pop_back();
  }
  return true;
}

void ConnectionServer::serve_member(Connection& c, const std::string& key) {
  serving = this;
  core::Status tls;
  if (!key.empty()) tls = start_tls(c.socket, /*server=*/true, key, door_.deadline);
  if (!tls.ok()) {
    if (refused_) refused_(c.peer, tls.error().message);
  } else {
    try {
      handler_(c.socket, c.peer);
    } catch (const std::exception& e) {
      trouble("serving " + c.peer + " failed (" + e.what() + "): closed");
    } catch (...) {
      trouble("serving " + c.peer + " failed (an unknown exception): closed");
    }
  }
  c.socket.shutdown();  // the peer sees the end now; the descriptor closes when reaped
  {
    std::lock_guard<std::mutex> lock(mu_);
    c.finished = true;
  }
  ended_.notify_all();
}

}  // namespace troupe::net
