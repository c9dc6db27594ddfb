#include "core/subprocess.hpp"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

extern char** environ;

namespace troupe::core {

namespace {

// Opens where one of the child's outputs goes, before fork; -1 for inherit. For a pipe,
// `read_end` gets the parent's end.
Expected<int> open_output(SpawnOptions::Output kind, const std::string& file, bool append,
                          int& read_end) {
  switch (kind) {
    case SpawnOptions::Output::inherit:
      return -1;
    case SpawnOptions::Output::pipe: {
      int fds[2];
      if (::pipe2(fds, O_CLOEXEC) != 0)
        return make_error(Errc::io_error, std::string("pipe: ") + std::strerror(errno));
      read_end = fds[0];
      return fds[1];
    }
    case SpawnOptions::Output::file: {
      const int fd = ::open(file.c_str(),
                            O_WRONLY | O_CREAT | O_CLOEXEC | (append ? O_APPEND : O_TRUNC), 0644);
      if (fd < 0) return make_error(Errc::io_error, file + ": " + std::strerror(errno));
      return fd;
    }
  }
  return -1;
}

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

}  // namespace

Expected<Subprocess> Subprocess::spawn(const SpawnOptions& o) {
  if (o.argv.empty()) return make_error(Errc::invalid_argument, "spawn: no program given");
  Subprocess p;
  auto out = open_output(o.out, o.out_file, o.append, p.out_fd_);
  if (!out) return out.error();
  int out_w = *out;
  int err_w = -1;
  // The same file for both: one descriptor, so that their lines interleave in order.
  if (o.err == SpawnOptions::Output::file && o.out == SpawnOptions::Output::file &&
      o.err_file == o.out_file) {
    err_w = ::dup(out_w);
  } else {
    auto err = open_output(o.err, o.err_file, o.append, p.err_fd_);
    if (!err) {
      close_fd(out_w);
      return err.error();
    }
    err_w = *err;
  }
  // Everything the child needs is built before fork: after it, only async-signal-safe calls.
  std::vector<char*> args, envp;
  for (const auto& a : o.argv)
    args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  for (const auto& e : o.env)
    envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  char* const* env = o.env.empty() ? environ : envp.data();
  // Signals are blocked across fork: until it executes its program, the child runs with a
  // copy of the parent's handlers, and a signal sent to it then (by whoever got its pid)
  // would run them in the child. The child sets every handler to the default first, then
  // takes the signals that came meanwhile as any program would.
  sigset_t all, old;
  ::sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &old);
  p.pid_ = ::fork();
  if (p.pid_ < 0) {
    const int e = errno;
    ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
    close_fd(out_w);
    close_fd(err_w);
    return make_error(Errc::unavailable, std::string("fork: ") + std::strerror(e));
  }
  if (p.pid_ == 0) {
    for (int sig = 1; sig < NSIG; ++sig)
      ::signal(sig, SIG_DFL);            // fails for SIGKILL, SIGSTOP and unused numbers: fine
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the parent, even one killed -9
    if (o.own_process_group) ::setpgid(0, 0);
    ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
    if (out_w >= 0) ::dup2(out_w, STDOUT_FILENO);
    if (err_w >= 0) ::dup2(err_w, STDERR_FILENO);
    if (o.search_path)
      ::execvpe(args[0], args.data(), env);
    else
      ::execve(args[0], args.data(), env);
    const char* why = std::strerror(errno);
    (void)!::write(STDERR_FILENO, "cannot execute ", 15);
    (void)!::write(STDERR_FILENO, args[0], std::strlen(args[0]));
    (void)!::write(STDERR_FILENO, ": ", 2);
    (void)!::write(STDERR_FILENO, why, std::strlen(why));
    (void)!::write(STDERR_FILENO, "\n", 1);
    ::_exit(127);
  }
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  // Also here, so that the group exists when spawn returns (whichever runs first).
  if (o.own_process_group) ::setpgid(p.pid_, p.pid_);
  close_fd(out_w);
  close_fd(err_w);
  p.pidfd_ = static_cast<int>(::syscall(SYS_pidfd_open, p.pid_, 0));
  return p;
}

Subprocess::Subprocess(Subprocess&& other) noexcept {
  *this = std::move(other);
}

Subprocess& Subprocess::operator=(Subprocess&& other) noexcept {
  if (this != &other) {
    reset();
    pid_ = std::exchange(other.pid_, -1);
    pidfd_ = std::exchange(other.pidfd_, -1);
    out_fd_ = std::exchange(other.out_fd_, -1);
    err_fd_ = std::exchange(other.err_fd_, -1);
    status_ = std::exchange(other.status_, std::nullopt);
  }
  return *this;
}

Subprocess::~Subprocess() {
  reset();
}

void Subprocess::reset() {
  if (pid_ > 0 && running()) {
    ::kill(pid_, SIGKILL);
    wait();
  }
  close_fd(pidfd_);
  close_fd(out_fd_);
  close_fd(err_fd_);
  pid_ = -1;
  status_.reset();
}

void Subprocess::close_out() {
  close_fd(out_fd_);
}

void Subprocess::signal(int sig) {
  if (pid_ > 0 && !status_) ::kill(pid_, sig);
}

bool Subprocess::running() {
  if (pid_ <= 0 || status_) return false;
  int st = 0;
  if (::waitpid(pid_, &st, WNOHANG) == pid_) status_ = st;
  return !status_;
}

std::optional<int> Subprocess::wait_exit(std::chrono::milliseconds timeout) {
  if (pid_ <= 0) return std::nullopt;
  if (!status_ && pidfd_ >= 0) {
    pollfd p{pidfd_, POLLIN, 0};
    ::poll(&p, 1, static_cast<int>(timeout.count()));
  }
  running();
  return status_;
}

int Subprocess::wait() {
  while (pid_ > 0 && !status_) {
    int st = 0;
    const pid_t r = ::waitpid(pid_, &st, 0);
    if (r == pid_) status_ = st;
    if (r < 0 && errno != EINTR) break;  // not our child (reaped elsewhere): nothing to wait for
  }
  return status_.value_or(-1);
}

}  // namespace troupe::core
