#pragma once

// Exit statuses that tell an orchestrator whether restarting a task can help, as Kubeflow
// TFJob's `restartPolicy: ExitCode` reads them: 130, 137, 143 (the container ended by
// SIGINT, SIGKILL, SIGTERM: Kubernetes reports 128 + the signal) and 138 (chosen by the
// program) are retryable; every other non-zero status is permanent. `troupe launch
// --restart-policy ExitCode` applies the same rule on one machine.

#include <sys/wait.h>

#include <csignal>

#include "core/expected.hpp"

namespace troupe {

/// A failure that a restart cannot fix: bad arguments or configuration, corrupt input, a
/// step's own error.
inline constexpr int exit_permanent = 1;
/// A failure that a restart may fix: a peer gone or not back in time, a deadline passed,
/// the OS refusing I/O. TFJob's code for retryable user errors (128 + SIGUSR1).
inline constexpr int exit_retryable = 138;

/// The status for a process that ends with error `e`: exit_retryable for `unavailable`
/// (peers, deadlines) and `io_error` (the machine's disk or network), exit_permanent for
/// everything else.
inline int exit_code_for(const core::Error& e) {
  return e.code == core::Errc::unavailable || e.code == core::Errc::io_error ? exit_retryable
                                                                             : exit_permanent;
}

/// The status an orchestrator sees for a waitpid() status: the exit code, or 128 + the
/// signal that ended the process.
inline int container_exit_code(int wait_status) {
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return WIFEXITED(wait_status) ? WEXITSTATUS(wait_status) : exit_permanent;
}

/// TFJob's ExitCode policy: whether a task that ended with `code` (container_exit_code) is
/// started again.
inline bool retryable_exit_code(int code) {
  return code == 128 + SIGINT || code == 128 + SIGKILL || code == 128 + SIGTERM ||
         code == exit_retryable;
}

}  // namespace troupe
