#pragma once

// Real child processes for multi-process tests (core::Subprocess): started with their own
// environment, stdout and stderr captured through pipes, waited on with bounded waits (a
// condition on what the child wrote, and its pidfd), and killed by pid when the test ends, whatever
// happens.

#include <arpa/inet.h>
#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/wait.h>  // the tests read wait statuses (WIFEXITED ...)
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/subprocess.hpp"
#include "net/ports.hpp"

extern char** environ;

namespace troupe::test {

/// A job secret for the tests that speak to doors and rings (32 bytes, as launch makes).
inline const std::string secret = "the job's secret, 32 bytes long!";

/// A free TCP port on 127.0.0.1 outside the ephemeral range (see net::PortLease).
inline uint16_t free_loopback_port() {
  return net::PortLease::acquire().port();
}

/// `n` "127.0.0.1:port" addresses on distinct free ports (ranks of a ring, tasks of a
/// cluster): every lease is held until all are chosen, so no port comes out twice.
inline std::vector<std::string> loopback_addresses(int n) {
  std::vector<net::PortLease> held;
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) {
    held.push_back(net::PortLease::acquire());
    out.push_back("127.0.0.1:" + std::to_string(held.back().port()));
  }
  return out;
}

/// A test's child (core::Subprocess): this environment plus `extra_env`, its stdout and
/// stderr captured. A thread of its own drains both pipes as the child writes, so a child
/// that logs much never blocks on a full pipe (which would look like a hung task), and its
/// JSON lines stay out of the test's own output, where they would push a failure's
/// message out of a truncated log.
class ChildProcess {
 public:
  ChildProcess(const std::vector<std::string>& argv, const std::vector<std::string>& extra_env) {
    core::SpawnOptions o;
    o.argv = argv;
    for (char** e = environ; *e; ++e)
      o.env.emplace_back(*e);
    for (const auto& e : extra_env)
      o.env.push_back(e);
    o.out = core::SpawnOptions::Output::pipe;
    o.err = core::SpawnOptions::Output::pipe;
    auto p = core::Subprocess::spawn(o);
    if (!p) return;
    process_ = std::move(*p);
    stop_fd_ = ::eventfd(0, EFD_CLOEXEC);
    reader_ = std::thread([this] { drain(); });
  }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  ~ChildProcess() {
    if (reader_.joinable()) {
      const uint64_t one = 1;
      (void)!::write(stop_fd_, &one, sizeof one);
      reader_.join();
    }
    if (stop_fd_ >= 0) ::close(stop_fd_);
  }  // then process_ goes: a child still running is killed and reaped

  pid_t pid() const { return process_.pid(); }
  std::string captured_stderr() const {
    std::lock_guard<std::mutex> lock(mu_);
    return err_;
  }
  std::string captured_stdout() const {
    std::lock_guard<std::mutex> lock(mu_);
    return out_;
  }
  void kill(int sig) { process_.signal(sig); }
  bool running() { return process_.running(); }

  /// Waits (bounded) until stderr shows a line containing `text`; false on timeout, or
  /// once the child has closed stderr (it exited) without writing it.
  bool wait_for_stderr(const std::string& text, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    return grown_.wait_for(lock, timeout, [&] {
      return err_.find(text) != std::string::npos || err_closed_;
    }) && err_.find(text) != std::string::npos;
  }

  /// Waits (bounded) for the process to exit; its wait status, or nullopt on timeout.
  std::optional<int> wait_exit(std::chrono::milliseconds timeout) {
    return process_.wait_exit(timeout);
  }

 private:
  void drain() {
    pollfd fds[3] = {
        {process_.out_fd(), POLLIN, 0}, {process_.err_fd(), POLLIN, 0}, {stop_fd_, POLLIN, 0}};
    for (;;) {
      if (fds[0].fd < 0 && fds[1].fd < 0) break;
      if (::poll(fds, 3, -1) < 0) {
        if (errno == EINTR) continue;
        break;
      }
      if (fds[2].revents != 0) break;
      for (int k = 0; k < 2; ++k) {
        if (fds[k].fd < 0 || fds[k].revents == 0) continue;
        char buf[4096];
        const ssize_t n = ::read(fds[k].fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        std::lock_guard<std::mutex> lock(mu_);
        if (n <= 0) {
          fds[k].fd = -1;  // the child closed it: it exited
          if (k == 1) err_closed_ = true;
        } else {
          (k == 0 ? out_ : err_).append(buf, static_cast<size_t>(n));
        }
        grown_.notify_all();
      }
    }
    std::lock_guard<std::mutex> lock(mu_);
    err_closed_ = true;
    grown_.notify_all();
  }

  core::Subprocess process_;  // killed and reaped when the test's object goes
  int stop_fd_ = -1;
  mutable std::mutex mu_;
  std::condition_variable grown_;
  std::string out_, err_;
  bool err_closed_ = false;
  std::thread reader_;
};

/// The TCP ports process `pid` listens on, at any address: its sockets (/proc/PID/fd)
/// among the listening ones of this network namespace (/proc/net/tcp and tcp6).
inline std::set<uint16_t> listening_ports(pid_t pid) {
  std::set<std::string> inodes;
  std::error_code ec;
  const std::string fd_dir = "/proc/" + std::to_string(pid) + "/fd";
  for (const auto& e : std::filesystem::directory_iterator(fd_dir, ec)) {
    const std::string link = std::filesystem::read_symlink(e.path(), ec).string();
    if (!ec && link.rfind("socket:[", 0) == 0) inodes.insert(link.substr(8, link.size() - 9));
  }
  std::set<uint16_t> ports;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // the header
    while (std::getline(in, line)) {
      std::istringstream f(line);
      std::string slot, local, remote, state, queues, timer, retr, uid, timeout, inode;
      f >> slot >> local >> remote >> state >> queues >> timer >> retr >> uid >> timeout >> inode;
      if (state != "0A" || !inodes.count(inode)) continue;  // 0A: LISTEN
      ports.insert(
          static_cast<uint16_t>(std::stoul(local.substr(local.find(':') + 1), nullptr, 16)));
    }
  }
  return ports;
}

/// What a process of another local user (nobody, uid and gid 65534, when this is root)
/// reads from a fresh connection to 127.0.0.1:`port`, saying nothing itself, until the
/// other end closes it or `wait` passes.
struct StrangerRead {
  bool connected = false;
  bool closed = false;  // by the other end, within `wait`
  std::string bytes;
};
inline StrangerRead read_as_another_user(uint16_t port, std::chrono::milliseconds wait) {
  int out[2];
  if (::pipe(out) != 0) return {};
  const pid_t pid = ::fork();
  if (pid == 0) {  // the child: only calls that are safe after a fork of a threaded process
    ::close(out[0]);
    if (::geteuid() == 0 &&
        (::setgroups(0, nullptr) != 0 || ::setgid(65534) != 0 || ::setuid(65534) != 0))
      ::_exit(2);
    char state = 0;  // 0 not connected, 1 open at the end, 2 closed by the other end
    char buf[4096];
    ssize_t total = 0;
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
      state = 1;
      timeval tv{static_cast<time_t>(wait.count() / 1000),
                 static_cast<suseconds_t>((wait.count() % 1000) * 1000)};
      ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
      while (total < static_cast<ssize_t>(sizeof buf)) {
        const ssize_t r = ::recv(fd, buf + total, sizeof buf - static_cast<size_t>(total), 0);
        if (r > 0) {
          total += r;
          continue;
        }
        if (r == 0 || errno == ECONNRESET) state = 2;
        break;
      }
    }
    (void)!::write(out[1], &state, 1);
    (void)!::write(out[1], buf, static_cast<size_t>(total));
    ::_exit(0);
  }
  ::close(out[1]);
  StrangerRead got;
  char state = 0;
  if (pid > 0 && ::read(out[0], &state, 1) == 1) {
    got.connected = state != 0;
    got.closed = state == 2;
    char buf[4096];
    for (ssize_t n; (n = ::read(out[0], buf, sizeof buf)) > 0;)
      got.bytes.append(buf, static_cast<size_t>(n));
  }
  ::close(out[0]);
  int status = 0;
  if (pid > 0) ::waitpid(pid, &status, 0);
  return got;
}

}  // namespace troupe::test
