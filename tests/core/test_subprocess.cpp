#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <fstream>
#include <sstream>
#include <string>

#include "core/subprocess.hpp"
#include "helpers.hpp"

using troupe::core::SpawnOptions;
using troupe::core::Subprocess;
using namespace std::chrono_literals;

namespace {

// All of a pipe's bytes until the child closes it.
std::string read_all(int fd) {
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;)
    out.append(buf, static_cast<size_t>(n));
  return out;
}

bool exited_with(const std::optional<int>& status, int code) {
  return status && WIFEXITED(*status) && WEXITSTATUS(*status) == code;
}

}  // namespace

TEST_CASE("Subprocess runs a program with the environment and outputs it is given",
          "[subprocess]") {
  SpawnOptions o;
  o.argv = {"/usr/bin/env"};
  o.env = {"ONLY_THIS=1"};
  o.out = SpawnOptions::Output::pipe;
  auto p = Subprocess::spawn(o);
  REQUIRE(p.ok());
  CHECK(read_all(p->out_fd()) == "ONLY_THIS=1\n");
  CHECK(exited_with(p->wait_exit(10s), 0));
  CHECK_FALSE(p->running());

  // stdout and stderr into one file, appended to by a second run.
  troupe::test::TempDir dir;
  SpawnOptions f;
  f.argv = {"sh", "-c", "echo out; echo err >&2; exit 3"};
  f.search_path = true;
  f.out = f.err = SpawnOptions::Output::file;
  f.out_file = f.err_file = dir.file("log");
  for (int run = 0; run < 2; ++run) {
    f.append = run > 0;
    auto q = Subprocess::spawn(f);
    REQUIRE(q.ok());
    const int status = q->wait();
    CHECK(q->status() == status);
    CHECK(exited_with(q->status(), 3));
  }
  std::ifstream log(dir.file("log"));
  std::stringstream text;
  text << log.rdbuf();
  CHECK(text.str() == "out\nerr\nout\nerr\n");
}

TEST_CASE("A program that cannot be executed exits 127 naming itself", "[subprocess]") {
  SpawnOptions o;
  o.argv = {"sh", "-c", "exit 0"};  // not a path, and PATH is not searched
  o.err = SpawnOptions::Output::pipe;
  auto p = Subprocess::spawn(o);
  REQUIRE(p.ok());
  CHECK_THAT(read_all(p->err_fd()), Catch::Contains("cannot execute sh"));
  CHECK(exited_with(p->wait_exit(10s), 127));
  CHECK(Subprocess::spawn(SpawnOptions{}).error().code == troupe::core::Errc::invalid_argument);
}

TEST_CASE("A Subprocess ends and reaps its running child when it goes, not when moved from",
          "[subprocess]") {
  SpawnOptions o;
  o.argv = {"/bin/sleep", "30"};
  o.own_process_group = true;
  pid_t pid = -1;
  {
    auto p = Subprocess::spawn(o);
    REQUIRE(p.ok());
    pid = p->pid();
    CHECK(::getpgid(pid) == pid);  // a process group of its own
    Subprocess moved = std::move(*p);
    CHECK(p->pid() == -1);
    CHECK(::kill(pid, 0) == 0);  // the moved-from object let it be
    CHECK(moved.running());
    CHECK_FALSE(moved.wait_exit(50ms).has_value());  // still running: no status
  }
  // Killed and reaped: the pid names no process (not even a zombie of ours).
  errno = 0;
  CHECK(::kill(pid, 0) == -1);
  CHECK(errno == ESRCH);

  // A signal reaches it, and its status says so.
  auto q = Subprocess::spawn(o);
  REQUIRE(q.ok());
  q->signal(SIGTERM);
  const auto status = q->wait_exit(10s);
  REQUIRE(status.has_value());
  CHECK((WIFSIGNALED(*status) && WTERMSIG(*status) == SIGTERM));
}
