// troupe launch itself: its restart policies (TFJob's Never, OnFailure, ExitCode), the exit
// status it passes on, and that it ends every process it started.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "helpers.hpp"
#include "launch_helpers.hpp"
#include "process.hpp"
#include "run_program.hpp"
#include "troupe/exit_codes.hpp"

using troupe::test::run_program;

namespace {

using troupe::test::bin;
using troupe::test::check_all_gone;

// The status of a child that ends with `code`, or by `signal` when it is non-zero.
int status_of_child(int code, int signal) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (signal != 0) {
      ::signal(signal, SIG_DFL);  // the test framework's handlers are inherited
      ::kill(::getpid(), signal);
    }
    ::_exit(code);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

// A job whose every task fails once (first run) and then behaves: the worker exits 138
// (retryable), the PS 1 (permanent), and the chief, once the tasks named in WAIT_FOR are
// back, exits 138 the first time and succeeds the second. Workers and PS tasks that came
// back serve until launch ends them. Waits are bounded (10 s).
const char* const flaky_job = R"(d=$TROUPE_RUN_DIR
first() { [ -e "$d/$1" ] && return 1; : > "$d/$1"; }
case "$TF_CONFIG" in
  *'"type":"worker"'*) first worker-failed && exit 138; : > "$d/worker-back"; exec tail -f /dev/null ;;
  *'"type":"ps"'*) first ps-failed && exit 1; : > "$d/ps-back"; exec tail -f /dev/null ;;
esac
for f in $WAIT_FOR; do
  n=0; while [ ! -e "$d/$f" ]; do n=$((n+1)); [ $n -gt 2000 ] && exit 1; sleep 0.005; done
done
first chief-failed && exit 138
echo '{"ok":true}'
)";

// Runs flaky_job under troupe launch (1 PS, 1 worker) with `policy_flags`, the chief
// waiting for the tasks in `wait_for`; `dir` gets the job and its run directory.
troupe::test::ProgramRun run_flaky_job(const troupe::test::TempDir& dir,
                                       const std::string& policy_flags,
                                       const std::string& wait_for) {
  std::ofstream(dir.file("job.sh")) << flaky_job;
  return run_program("WAIT_FOR='" + wait_for + "' " + bin +
                     "/troupe launch --ps 1 --workers 1 --grace-ms 300 " + policy_flags +
                     " --run-dir " + dir.file("run") + " -- /bin/sh " + dir.file("job.sh"));
}

}  // namespace

TEST_CASE("Exit codes follow TFJob's ExitCode policy", "[example][launch]") {
  using troupe::core::Errc;
  using troupe::core::Error;
  CHECK(troupe::exit_code_for(Error{Errc::unavailable, "ps:1 did not come back"}) == 138);
  CHECK(troupe::exit_code_for(Error{Errc::io_error, "disk full"}) == 138);
  for (auto c : {Errc::invalid_argument, Errc::not_found, Errc::data_loss, Errc::out_of_range,
                 Errc::cancelled, Errc::internal, Errc::permission_denied})
    CHECK(troupe::exit_code_for(Error{c, ""}) == troupe::exit_permanent);
  // What a container's status reads as, from real processes.
  CHECK(troupe::container_exit_code(status_of_child(0, 0)) == 0);
  CHECK(troupe::container_exit_code(status_of_child(3, 0)) == 3);
  CHECK(troupe::container_exit_code(status_of_child(0, SIGKILL)) == 137);
  CHECK(troupe::container_exit_code(status_of_child(0, SIGTERM)) == 143);
  for (int retryable : {130, 137, 138, 143})
    CHECK(troupe::retryable_exit_code(retryable));
  for (int permanent : {1, 2, 126, 127, 128, 134, 139, 255})
    CHECK_FALSE(troupe::retryable_exit_code(permanent));
}

TEST_CASE("troupe launch --restart-policy ExitCode restarts retryable failures only",
          "[example][launch]") {
  troupe::test::TempDir dir;
  auto r = run_flaky_job(dir, "--restart-policy ExitCode", "worker-back");
  INFO(r.output);
  CHECK(r.exit_code == 0);  // the chief's second run succeeded
  REQUIRE(r.last_json.is_object());
  CHECK(r.last_json["restarts"] == 2);
  for (const auto& t : r.last_json["tasks"]) {
    INFO(t.dump());
    if (t["task"] == "ps:0") {
      CHECK(t["exit"] == 1);  // permanent: final
      CHECK_FALSE(t.contains("earlier_pids"));
    } else {
      CHECK(t["earlier_pids"].size() == 1);  // worker and chief: 138, started again
    }
  }
  CHECK_FALSE(std::filesystem::exists(dir.file("run/ps-back")));
  check_all_gone(r.last_json["tasks"]);
}

TEST_CASE("troupe launch OnFailure restarts every failed server and passes the chief status on",
          "[example][launch]") {
  troupe::test::TempDir dir;
  auto r = run_flaky_job(dir, "--restart-failed", "worker-back ps-back");
  INFO(r.output);
  // The chief exited 138: not restarted under OnFailure (it reported its error), and
  // launch exits with its status, so that an orchestrator above applies its own policy.
  CHECK(r.exit_code == troupe::exit_retryable);
  REQUIRE(r.last_json.is_object());
  CHECK(r.last_json["restarts"] == 2);  // the worker (138) and the PS (1)
  CHECK(std::filesystem::exists(dir.file("run/ps-back")));
  check_all_gone(r.last_json["tasks"]);
}

TEST_CASE("troupe launch kills tasks that outlive the chief", "[example][launch]") {
  // Non-chief tasks of this job never exit by themselves.
  troupe::test::TempDir dir;
  const std::string job = dir.file("job.sh");
  std::ofstream(job) << "case \"$TF_CONFIG\" in\n"
                        "  *'\"type\":\"chief\"'*) echo '{\"ok\":true}' ;;\n"
                        "  *) exec tail -f /dev/null ;;\n"
                        "esac\n";
  auto r = run_program(bin + "/troupe launch --ps 1 --workers 1 --grace-ms 300 -- /bin/sh " + job);
  INFO(r.output);
  CHECK(r.exit_code == 0);
  REQUIRE(r.last_json.is_object());
  int killed = 0;
  for (const auto& t : r.last_json["tasks"])
    if (t.contains("signal") && t["signal"] == SIGKILL) ++killed;
  CHECK(killed == 2);
  check_all_gone(r.last_json["tasks"]);
}

TEST_CASE("troupe launch ends every task when interrupted", "[example][launch]") {
  using namespace std::chrono_literals;
  troupe::test::TempDir dir;
  const std::string job = dir.file("forever.sh");
  std::ofstream(job) << "exec tail -f /dev/null\n";
  troupe::test::ChildProcess launcher({bin + "/troupe", "launch", "--ps", "1", "--workers", "2",
                                       "--run-dir", dir.path(), "--", "/bin/sh", job},
                                      {});
  REQUIRE(launcher.wait_for_stderr("tasks started", 10s));
  auto listing = nlohmann::json::parse(std::ifstream(dir.file("tasks.json")));
  REQUIRE(listing.size() == 4);
  for (const auto& t : listing)
    CHECK(::kill(t["pid"].get<int>(), 0) == 0);  // all running
  launcher.kill(SIGINT);
  auto status = launcher.wait_exit(10s);
  REQUIRE(status.has_value());
  CHECK(WIFEXITED(*status));
  CHECK(WEXITSTATUS(*status) == 128 + SIGINT);  // as a container ended by the signal
  check_all_gone(listing);
}

namespace {

mode_t mode_of(const std::string& path) {
  struct stat st {};
  REQUIRE(::lstat(path.c_str(), &st) == 0);
  return st.st_mode & 07777;
}

// `command` run as user nobody (uid and gid 65534, no groups): its exit code.
int as_nobody(const std::string& command) {
  return run_program("setpriv --reuid=65534 --regid=65534 --clear-groups " + command +
                     " >/dev/null 2>&1; echo \"{\\\"rc\\\": $?}\"")
      .last_json["rc"]
      .get<int>();
}

}  // namespace

// Found from outside: another user who owned --run-dir replaced the secret file right after
// launch wrote it and joined the job. A run directory must be this user's and private, in
// parents nobody else can swap it out of; another local user reads nothing of a job.
TEST_CASE("troupe launch keeps its run directory private and refuses one others control",
          "[example][launch]") {
  troupe::test::TempDir dir;
  std::ofstream(dir.file("job.sh")) << "echo '{\"ok\":true}'\n";
  auto launch = [&](const std::string& run_dir) {
    return run_program(bin + "/troupe launch --workers 1 --run-dir " + run_dir + " -- /bin/sh " +
                       dir.file("job.sh") + " 2>&1");
  };
  auto refused = [&](const std::string& run_dir, const std::string& why) {
    auto r = launch(run_dir);
    INFO(r.output);
    CHECK(r.exit_code != 0);
    REQUIRE(r.last_json.is_object());
    CHECK(r.last_json["ok"] == false);
    CHECK_THAT(r.last_json["error"].get<std::string>(),
               Catch::Contains(run_dir) && Catch::Contains(why));
    CHECK_FALSE(std::filesystem::exists(run_dir + "/cluster-secret"));
  };

  // Made by launch, or this user's and too open: private (0700) before the secret is in it.
  for (const std::string name : {"fresh/run", "open"}) {
    const std::string run_dir = dir.file(name);
    if (name == "open") {
      std::filesystem::create_directory(run_dir);
      ::chmod(run_dir.c_str(), 0777);
    }
    auto r = launch(run_dir);
    INFO(r.output);
    CHECK(r.exit_code == 0);
    CHECK(mode_of(run_dir) == 0700);
    CHECK(mode_of(run_dir + "/cluster-secret") == 0600);
  }

  // A link to it, and a parent anyone may write without the sticky bit.
  std::filesystem::create_directory(dir.file("target"));
  std::filesystem::create_directory_symlink(dir.file("target"), dir.file("link"));
  refused(dir.file("link"), "is a symbolic link");
  std::filesystem::create_directory(dir.file("shared"));
  ::chmod(dir.file("shared").c_str(), 0777);
  refused(dir.file("shared/run"), "its parent " + dir.file("shared") + " has mode 0777");

  if (::geteuid() != 0) {
    WARN("not root: the tests with another user's directory and reads as nobody are skipped");
    return;
  }
  // Another user's directory, even one this user (root) may write.
  std::filesystem::create_directory(dir.file("theirs"));
  REQUIRE(::chown(dir.file("theirs").c_str(), 65534, 65534) == 0);
  refused(dir.file("theirs"), "is owned by uid 65534");

  // User nobody gets nothing of a job: not its secret, nor its logs, nor the listing.
  ::chmod(dir.path().c_str(), 0755);  // the test's own directory is not what keeps it out
  const std::string run_dir = dir.file("open");
  REQUIRE(std::filesystem::exists(run_dir + "/worker-0.log"));
  CHECK(as_nobody("cat " + run_dir + "/cluster-secret") != 0);
  CHECK(as_nobody("cat " + run_dir + "/worker-0.log") != 0);
  CHECK(as_nobody("ls " + run_dir) != 0);
  CHECK(as_nobody("ls " + dir.path()) == 0);  // the check itself works: nobody ran
}

TEST_CASE(
    "troupe launch raises the descriptor limit its tasks inherit and says when the "
    "system's is too low",
    "[example][launch]") {
  rlimit l{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &l) == 0);
  if (l.rlim_max != RLIM_INFINITY && l.rlim_max < 512) {
    WARN("skipped: the hard descriptor limit is under 512");
    return;
  }
  troupe::test::TempDir dir;
  const std::string job = dir.file("job.sh");
  // The chief reports the soft limit it was started with; the others exit at once.
  std::ofstream(job)
      << "case \"$TF_CONFIG\" in\n"
         "  *'\"type\":\"chief\"'*) echo \"{\\\"ok\\\":true,\\\"nofile\\\":\\\"$(ulimit "
         "-Sn)\\\"}\" ;;\n"
         "esac\n";
  const std::string launch =
      bin + "/troupe launch --ps 1 --workers 1 --grace-ms 300 -- /bin/sh " + job;

  SECTION("a soft limit below the hard one is raised to it") {
    auto r = run_program("ulimit -Sn 256 && " + launch + " 2>/dev/null");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    REQUIRE(r.last_json.is_object());
    const auto& d = r.last_json["host_limits"]["descriptors"];
    CHECK(d["soft_before"] == 256);
    const std::string hard = l.rlim_max == RLIM_INFINITY ? "unlimited" : std::to_string(l.rlim_max);
    CHECK(r.last_json["chief"]["nofile"] == hard);
    CHECK(r.last_json["host_limits"]["shortfalls"].empty());
    check_all_gone(r.last_json["tasks"]);
  }
  SECTION("a hard limit below what the job needs is named, and the job still runs") {
    // 3 tasks need 64 + 6 * 3 descriptors in a chief: a hard limit of 70 falls short.
    auto r = run_program("ulimit -n 70 && " + launch + " 2>&1");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    REQUIRE(r.last_json.is_object());
    CHECK(r.last_json["chief"]["nofile"] == "70");
    const auto& s = r.last_json["host_limits"]["shortfalls"];
    REQUIRE(s.size() == 1);
    CHECK(s[0].get<std::string>().find("RLIMIT_NOFILE) is 70") != std::string::npos);
    CHECK(r.output.find("troupe launch: the system's limits may be too low: descriptors") !=
          std::string::npos);
    check_all_gone(r.last_json["tasks"]);
  }
}
