#pragma once
// A child process owned by one object: started with fork/exec, ended (SIGKILL) and reaped
// by its destructor, so that whoever starts a process ends it by its id. `troupe launch`
// runs a job's tasks with it; the multi-process tests run theirs.
//
//   SpawnOptions o;
//   o.argv = {"/bin/echo", "hi"};
//   o.out = SpawnOptions::Output::pipe;
//   auto p = Subprocess::spawn(o).value();
//   ... read p.out_fd() ...
//   auto status = p.wait_exit(std::chrono::seconds(5));  // the wait status, if it ended

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "core/expected.hpp"

namespace troupe::core {

struct SpawnOptions {
  std::vector<std::string> argv;  // argv[0] is the program
  /// Looked up on PATH (execvpe) rather than taken as a path (execve).
  bool search_path = false;
  /// The child's environment, "NAME=value" each; empty: this process's environment.
  std::vector<std::string> env;
  /// Where the child's stdout and stderr go: inherited, a pipe this object reads
  /// (out_fd(), err_fd()), or a file appended to or truncated (`out_file`, `err_file`).
  enum class Output { inherit, pipe, file };
  Output out = Output::inherit, err = Output::inherit;
  std::string out_file, err_file;
  bool append = false;  // files are appended to rather than truncated
  /// The child leads a process group of its own (signals to the parent's group miss it).
  bool own_process_group = false;
};

class Subprocess {
 public:
  /// Starts the child. The child is killed when this process dies (PR_SET_PDEATHSIG), even
  /// by SIGKILL. A program that cannot be executed exits 127 after naming it on stderr.
  static Expected<Subprocess> spawn(const SpawnOptions& options);

  Subprocess() = default;
  Subprocess(Subprocess&& other) noexcept;
  Subprocess& operator=(Subprocess&& other) noexcept;
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;
  /// A child still running is killed (SIGKILL) and reaped.
  ~Subprocess();

  pid_t pid() const { return pid_; }
  /// The read ends of the pipes (-1 when not piped, or closed).
  int out_fd() const { return out_fd_; }
  int err_fd() const { return err_fd_; }
  void close_out();

  /// Sends `sig` unless the child has been reaped (its pid may be another process's by then).
  void signal(int sig);
  /// Reaps the child if it has ended, without waiting; whether it is still running.
  bool running();
  /// Waits at most `timeout` for the child to end (on its pidfd, no polling loop); its wait
  /// status, or nullopt if it is still running.
  std::optional<int> wait_exit(std::chrono::milliseconds timeout);
  /// Waits as long as it takes.
  int wait();
  /// The wait status once reaped.
  const std::optional<int>& status() const { return status_; }

 private:
  void reset();
  pid_t pid_ = -1;
  int pidfd_ = -1;
  int out_fd_ = -1;
  int err_fd_ = -1;
  std::optional<int> status_;
};

}  // namespace troupe::core
