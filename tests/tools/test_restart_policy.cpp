// troupe launch's restart policies (TFJob's Never, OnFailure, ExitCode) as a plain
// function of a task's wait status; tests/examples/test_launch.cpp runs them on real jobs.
#include <catch2/catch.hpp>

#include <signal.h>

#include "tools/launch.hpp"

using troupe::tools::RestartPolicy;
using troupe::tools::should_restart;

namespace {

// Wait statuses as waitpid reports them.
int exited(int code) {
  return (code & 0xff) << 8;
}
int killed_by(int sig) {
  return sig & 0x7f;
}

}  // namespace

TEST_CASE("Restart policies decide from a task's wait status and its restarts so far", "[launch]") {
  for (bool chief : {false, true}) {
    for (int status : {exited(0), exited(1), exited(137), killed_by(SIGKILL)})
      CHECK_FALSE(should_restart(RestartPolicy::never, chief, status, 0, 10));
    CHECK_FALSE(should_restart(RestartPolicy::on_failure, chief, exited(0), 0, 10));
    CHECK(should_restart(RestartPolicy::on_failure, chief, killed_by(SIGKILL), 0, 10));
    CHECK_FALSE(should_restart(RestartPolicy::exit_code, chief, exited(0), 0, 10));
  }
  // OnFailure: a server that exits non-zero comes back; a chief that did has reported it.
  CHECK(should_restart(RestartPolicy::on_failure, false, exited(1), 0, 10));
  CHECK_FALSE(should_restart(RestartPolicy::on_failure, true, exited(1), 0, 10));
  // ExitCode: retryable codes and signals only, the chief included.
  for (bool chief : {false, true}) {
    CHECK(should_restart(RestartPolicy::exit_code, chief, exited(137), 0, 10));
    CHECK(should_restart(RestartPolicy::exit_code, chief, exited(130), 0, 10));
    CHECK(should_restart(RestartPolicy::exit_code, chief, killed_by(SIGTERM), 0, 10));
    CHECK_FALSE(should_restart(RestartPolicy::exit_code, chief, exited(1), 0, 10));
    CHECK_FALSE(should_restart(RestartPolicy::exit_code, chief, killed_by(SIGSEGV), 0, 10));
  }
  // Past max_restarts, a failure is final.
  CHECK(should_restart(RestartPolicy::on_failure, false, exited(1), 9, 10));
  CHECK_FALSE(should_restart(RestartPolicy::on_failure, false, exited(1), 10, 10));
}
