#pragma once

// Real child processes for multi-process tests: started with their own environment,
// stderr captured through a pipe, waited on with bounded waits (poll on the pipe and on a
// pidfd), and killed by pid when the test ends, whatever happens.

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "net/ports.hpp"

extern char** environ;

namespace troupe::test {

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

class ChildProcess {
 public:
  ChildProcess(const std::vector<std::string>& argv, const std::vector<std::string>& extra_env) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) return;
    std::vector<std::string> env_strings;
    for (char** e = environ; *e; ++e)
      env_strings.emplace_back(*e);
    for (const auto& e : extra_env)
      env_strings.push_back(e);
    pid_ = ::fork();
    if (pid_ == 0) {
      // Die with the test process, even when it crashes before its destructors run.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      ::dup2(fds[1], STDERR_FILENO);
      std::vector<char*> args, envp;
      for (const auto& a : argv)
        args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      for (const auto& e : env_strings)
        envp.push_back(const_cast<char*>(e.c_str()));
      envp.push_back(nullptr);
      ::execve(args[0], args.data(), envp.data());
      ::_exit(127);
    }
    ::close(fds[1]);
    err_fd_ = fds[0];
    pidfd_ = static_cast<int>(::syscall(SYS_pidfd_open, pid_, 0));
  }
  ~ChildProcess() {
    if (running()) kill(SIGKILL);
    wait_exit(std::chrono::seconds(5));
    if (err_fd_ >= 0) ::close(err_fd_);
    if (pidfd_ >= 0) ::close(pidfd_);
  }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  const std::string& captured_stderr() const { return err_; }

  void kill(int sig) {
    if (pid_ > 0 && !status_) ::kill(pid_, sig);
  }

  bool running() {
    if (pid_ <= 0 || status_) return false;
    int st = 0;
    if (::waitpid(pid_, &st, WNOHANG) == pid_) status_ = st;
    return !status_;
  }

  /// Waits (bounded) until stderr shows a line containing `text`; false on timeout or exit.
  bool wait_for_stderr(const std::string& text, std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (err_.find(text) == std::string::npos) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      pollfd p{err_fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
      char buf[4096];
      const ssize_t n = ::read(err_fd_, buf, sizeof buf);
      if (n <= 0) return false;  // the child closed stderr: it exited
      err_.append(buf, static_cast<size_t>(n));
    }
    return true;
  }

  /// Waits (bounded) for the process to exit; its wait status, or nullopt on timeout.
  std::optional<int> wait_exit(std::chrono::milliseconds timeout) {
    if (pid_ <= 0) return std::nullopt;
    if (!status_ && pidfd_ >= 0) {
      pollfd p{pidfd_, POLLIN, 0};
      ::poll(&p, 1, static_cast<int>(timeout.count()));
    }
    running();
    return status_;
  }

 private:
  pid_t pid_ = -1;
  int err_fd_ = -1;
  int pidfd_ = -1;
  std::string err_;
  std::optional<int> status_;
};

}  // namespace troupe::test
