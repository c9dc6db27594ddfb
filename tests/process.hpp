#pragma once

// Real child processes for multi-process tests (core::Subprocess): started with their own
// environment, stderr captured through a pipe, waited on with bounded waits (poll on the
// pipe and on a pidfd), and killed by pid when the test ends, whatever happens.

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>  // the tests read wait statuses (WIFEXITED ...)
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "core/subprocess.hpp"
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

/// A test's child (core::Subprocess): this environment plus `extra_env`, stderr captured.
class ChildProcess {
 public:
  ChildProcess(const std::vector<std::string>& argv, const std::vector<std::string>& extra_env) {
    core::SpawnOptions o;
    o.argv = argv;
    for (char** e = environ; *e; ++e)
      o.env.emplace_back(*e);
    for (const auto& e : extra_env)
      o.env.push_back(e);
    o.err = core::SpawnOptions::Output::pipe;
    if (auto p = core::Subprocess::spawn(o)) process_ = std::move(*p);
  }

  pid_t pid() const { return process_.pid(); }
  const std::string& captured_stderr() const { return err_; }
  void kill(int sig) { process_.signal(sig); }
  bool running() { return process_.running(); }

  /// Waits (bounded) until stderr shows a line containing `text`; false on timeout or exit.
  bool wait_for_stderr(const std::string& text, std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (err_.find(text) == std::string::npos) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0 || process_.err_fd() < 0) return false;
      pollfd p{process_.err_fd(), POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
      char buf[4096];
      const ssize_t n = ::read(process_.err_fd(), buf, sizeof buf);
      if (n <= 0) return false;  // the child closed stderr: it exited
      err_.append(buf, static_cast<size_t>(n));
    }
    return true;
  }

  /// Waits (bounded) for the process to exit; its wait status, or nullopt on timeout.
  std::optional<int> wait_exit(std::chrono::milliseconds timeout) {
    return process_.wait_exit(timeout);
  }

 private:
  core::Subprocess process_;  // killed and reaped when the test's object goes
  std::string err_;
};

}  // namespace troupe::test
