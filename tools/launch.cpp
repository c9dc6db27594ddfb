#include "tools/launch.hpp"

#include "net/auth.hpp"
#include "net/tls.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>

#include "core/json_text.hpp"
#include "net/cluster_spec.hpp"
#include "net/ports.hpp"
#include "troupe/exit_codes.hpp"

extern char** environ;

namespace troupe::tools {

namespace {

volatile sig_atomic_t interrupted = 0;  // the signal that interrupted launch; 0: none

void on_signal(int sig) {
  interrupted = sig;
}

struct Task {
  net::TaskId id;
  pid_t pid = -1;
  int out_fd = -1;  // chief only: its stdout pipe
  std::optional<int> status;
  std::vector<pid_t> earlier_pids;  // processes of this task that failed and were restarted
};

// Starts `argv` with TF_CONFIG set; stdout to `stdout_pipe` (when given) or the log;
// stderr to the log, appended to when `append` (a restart).
pid_t start(const std::vector<std::string>& argv, const std::string& tf_config,
            const std::string& run_dir, const std::string& log_path, int* stdout_pipe,
            bool append = false) {
  int fds[2] = {-1, -1};
  if (stdout_pipe && ::pipe2(fds, O_CLOEXEC) != 0) return -1;
  const int log = ::open(log_path.c_str(),
                         O_WRONLY | O_CREAT | O_CLOEXEC | (append ? O_APPEND : O_TRUNC), 0644);
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e)
    if (std::strncmp(*e, "TF_CONFIG=", 10) != 0 && std::strncmp(*e, "TROUPE_RUN_DIR=", 15) != 0)
      env.emplace_back(*e);
  env.push_back("TF_CONFIG=" + tf_config);
  // A directory every task of the run shares: programs keep checkpoints and logs there.
  env.push_back("TROUPE_RUN_DIR=" + run_dir);
  const pid_t pid = ::fork();
  if (pid == 0) {
    // Never outlive the launcher, even if it is killed with SIGKILL.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    ::setpgid(0, 0);
    ::dup2(stdout_pipe ? fds[1] : log, STDOUT_FILENO);
    ::dup2(log, STDERR_FILENO);
    std::vector<char*> args, envp;
    for (const auto& a : argv)
      args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    for (const auto& e : env)
      envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
    ::execvpe(args[0], args.data(), envp.data());
    std::fprintf(stderr, "troupe launch: cannot execute %s: %s\n", args[0], std::strerror(errno));
    ::_exit(127);
  }
  if (log >= 0) ::close(log);
  if (stdout_pipe) {
    ::close(fds[1]);
    *stdout_pipe = fds[0];
  }
  return pid;
}

std::string log_path(const std::string& run_dir, const net::TaskId& id) {
  return run_dir + "/" + id.type + "-" + std::to_string(id.index) + ".log";
}

bool failed(int status) {
  return !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

bool chief_ok_exit(const Task& t) {
  return t.status && WIFEXITED(*t.status) && WEXITSTATUS(*t.status) == 0;
}

bool reap(Task& t, bool block) {
  if (t.pid <= 0 || t.status) return true;
  int st = 0;
  const pid_t r = ::waitpid(t.pid, &st, block ? 0 : WNOHANG);
  if (r == t.pid) t.status = st;
  return t.status.has_value();
}

nlohmann::json describe_status(const Task& t) {
  nlohmann::json j{{"task", t.id.to_string()}, {"pid", t.pid}};
  if (!t.earlier_pids.empty()) j["earlier_pids"] = t.earlier_pids;
  if (!t.status) {
    j["exit"] = nullptr;
  } else if (WIFEXITED(*t.status)) {
    j["exit"] = WEXITSTATUS(*t.status);
  } else if (WIFSIGNALED(*t.status)) {
    j["signal"] = WTERMSIG(*t.status);
  }
  return j;
}

}  // namespace

nlohmann::json launch(const LaunchOptions& o, int& exit_code) {
  namespace fs = std::filesystem;
  exit_code = 1;
  std::string run_dir = o.run_dir;
  if (run_dir.empty()) {
    std::string tmpl = (fs::temp_directory_path() / "troupe-run-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr)
      return {{"ok", false}, {"error", "cannot create a run directory"}};
    run_dir = tmpl;
  }
  std::error_code ec;
  fs::create_directories(run_dir, ec);
  if (ec) return {{"ok", false}, {"error", run_dir + ": " + ec.message()}};
  // A secret for this job, unless the caller gave one: every task's tensor channel then
  // refuses connections that do not prove it (net/auth.hpp). Readable by this user only.
  struct ForgetSecret {  // the variable names this run's file: not for a later launch()
    bool set = false;
    ~ForgetSecret() {
      if (set) ::unsetenv(net::cluster_secret_file_env);
    }
  } forget;
  bool own_secret = false;
  if (std::getenv(net::cluster_secret_env) == nullptr &&
      std::getenv(net::cluster_secret_file_env) == nullptr) {
    auto secret = net::new_cluster_secret();
    if (!secret) return {{"ok", false}, {"error", secret.error().to_string()}};
    const std::string path = run_dir + "/cluster-secret";
    fs::remove(path, ec);
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0 ||
        ::write(fd, secret->data(), secret->size()) != static_cast<ssize_t>(secret->size()))
      return {{"ok", false}, {"error", path + ": cannot write the cluster secret"}};
    ::close(fd);
    ::setenv(net::cluster_secret_file_env, path.c_str(), 1);
    forget.set = own_secret = true;
  } else if (auto checked = net::cluster_secret_from_env(); !checked) {
    return {{"ok", false}, {"error", checked.error().to_string()}};
  }
  struct ForgetTls {  // as for the secret: this run's choice, not a later launch()'s
    bool set = false;
    ~ForgetTls() {
      if (set) ::unsetenv(net::tls_env);
    }
  } forget_tls;
  if (o.tls && std::getenv(net::tls_env) == nullptr) {
    ::setenv(net::tls_env, "1", 1);
    forget_tls.set = true;
  }
  auto tls = net::tls_from_env(/*have_secret=*/true);
  if (!tls) return {{"ok", false}, {"error", tls.error().to_string()}};

  // Choose every port while holding them all, then release them just before starting.
  // With PS tasks the cluster has a chief (ParameterServerStrategy's coordinator); without
  // them it is a MultiWorkerMirroredStrategy cluster of workers only, worker 0 the chief
  // (TensorFlow's convention when no chief task is named).
  if (o.workers < 0 || o.ps < 0 || (o.ps == 0 && o.workers == 0))
    return {{"ok", false}, {"error", "a cluster needs PS tasks (with a chief) or workers"}};
  const net::TaskId lead_id = o.ps > 0 ? net::TaskId{"chief", 0} : net::TaskId{"worker", 0};
  std::map<std::string, int> counts{{"worker", o.workers}};
  if (o.ps > 0) {
    counts["chief"] = 1;
    counts["ps"] = o.ps;
  }
  if (o.evaluator) counts["evaluator"] = 1;
  std::map<std::string, std::vector<std::string>> jobs;
  std::vector<net::PortLease> leases;
  for (const auto& [job, n] : counts)
    for (int i = 0; i < n; ++i) {
      leases.push_back(net::PortLease::acquire());
      if (leases.back().port() == 0) return {{"ok", false}, {"error", "no free port on 127.0.0.1"}};
      jobs[job].push_back(net::host_port_text(o.host, leases.back().port()));
    }
  const net::ClusterSpec spec(jobs);
  for (const auto& e : o.chaos)
    if (e.task.index >= spec.num_tasks(e.task.type))
      return {{"ok", false},
              {"error", "chaos event " + e.to_string() + " names a task not in the cluster"}};
  for (auto& l : leases)
    l.release();

  struct sigaction sa {};
  sa.sa_handler = on_signal;
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);

  std::vector<Task> tasks;
  Task* chief = nullptr;
  for (const auto& id : spec.tasks()) {
    // Servers first, the chief last: it connects to them (and retries until they are up).
    if (id == lead_id) continue;
    Task t;
    t.id = id;
    t.pid = start(o.program, net::TFConfigClusterResolver::render(spec, id), run_dir,
                  log_path(run_dir, id), nullptr);
    tasks.push_back(t);
  }
  {
    Task t;
    t.id = lead_id;
    t.pid = start(o.program, net::TFConfigClusterResolver::render(spec, t.id), run_dir,
                  log_path(run_dir, t.id), &t.out_fd);
    tasks.push_back(t);
    chief = &tasks.back();
  }
  // tasks.json names every task's address and current pid (rewritten on each restart).
  auto write_listing = [&] {
    nlohmann::json listing = nlohmann::json::array();
    for (const auto& t : tasks)
      listing.push_back({{"type", t.id.type},
                         {"index", t.id.index},
                         {"address", spec.address(t.id)},
                         {"pid", t.pid}});
    const std::string path = run_dir + "/tasks.json", tmp = path + ".tmp";
    std::ofstream(tmp) << troupe::core::json_text(listing, 2) << "\n";
    fs::rename(tmp, path, ec);
  };
  write_listing();
  std::cerr << "troupe launch: " << tasks.size() << " tasks started, logs and tasks.json in "
            << run_dir << std::endl;

  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  auto pid_of = [&](const net::TaskId& id) {
    for (const auto& t : tasks)
      if (t.id == id) return t.pid;
    return pid_t{-1};
  };
  ChaosInjector chaos(o.chaos, pid_of, t0);

  // A failed task is started again at once on the same address when the restart policy
  // says so (LaunchOptions::restart_policy); an orderly exit (0) is always final.
  int restarts = 0;
  auto restart = [&](Task& t) {
    const pid_t old = t.pid;
    t.earlier_pids.push_back(old);
    t.status.reset();
    t.pid = start(o.program, net::TFConfigClusterResolver::render(spec, t.id), run_dir,
                  log_path(run_dir, t.id), &t == chief ? &t.out_fd : nullptr, /*append=*/true);
    ++restarts;
    const double at_s = std::chrono::duration<double>(clock::now() - t0).count();
    std::cerr << "troupe launch: restarted " << t.id.to_string() << " (pid " << old << " -> "
              << t.pid << ") at " << at_s << " s" << std::endl;
    write_listing();
  };
  // Whether `t`, ended with *t.status, is started again.
  auto should_restart = [&](const Task& t) {
    if (interrupted || static_cast<int>(t.earlier_pids.size()) >= o.max_restarts) return false;
    switch (o.restart_policy) {
      case RestartPolicy::never:
        return false;
      case RestartPolicy::on_failure:
        return &t == chief ? WIFSIGNALED(*t.status) : failed(*t.status);
      case RestartPolicy::exit_code:
        return retryable_exit_code(container_exit_code(*t.status));
    }
    return false;
  };
  auto restart_failed = [&] {
    for (auto& t : tasks) {
      if (&t == chief || !reap(t, false) || !should_restart(t)) continue;
      restart(t);
    }
  };

  // Forward the chief's output line by line, and keep its last JSON line.
  std::string pending, chief_json;
  std::ofstream chief_out(run_dir + "/" + lead_id.type + "-" + std::to_string(lead_id.index) +
                          ".stdout");
  char buf[65536];
  while (!interrupted && chief->out_fd >= 0) {
    chaos.run_due();
    restart_failed();
    int wait_ms = o.restart_policy != RestartPolicy::never ? 20 : 200;
    if (auto next = chaos.next_due())
      wait_ms = static_cast<int>(std::clamp<int64_t>(next->count(), 0, wait_ms));
    pollfd p{chief->out_fd, POLLIN, 0};
    const int r = ::poll(&p, 1, wait_ms);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) continue;
    const ssize_t n = ::read(chief->out_fd, buf, sizeof buf);
    if (n <= 0) {
      // The chief's output ended: it exited, or a signal ended it.
      ::close(chief->out_fd);
      chief->out_fd = -1;
      reap(*chief, /*block=*/true);
      if (should_restart(*chief)) {
        pending.clear();  // a partial line of the process that died
        restart(*chief);
        continue;
      }
      break;
    }
    pending.append(buf, static_cast<size_t>(n));
    size_t nl;
    while ((nl = pending.find('\n')) != std::string::npos) {
      const std::string line = pending.substr(0, nl);
      pending.erase(0, nl + 1);
      std::cout << line << "\n" << std::flush;
      chief_out << line << "\n";
      if (!line.empty() && line.front() == '{') chief_json = line;
    }
  }
  if (chief->out_fd >= 0) ::close(chief->out_fd);
  if (interrupted) ::kill(chief->pid, SIGTERM);
  reap(*chief, /*block=*/true);

  // A task still stopped when the chief ends is resumed so that it can exit.
  chaos.resume_all();
  // The chief shuts the cluster down when it finishes; give the others a grace period,
  // then end them by pid. An evaluator follows the chief's last checkpoint and stops by
  // itself after evaluating it: it gets longer (evaluator_grace_ms).
  auto wait_until = [&](Task& t, std::chrono::steady_clock::time_point deadline) {
    while (!reap(t, false) && std::chrono::steady_clock::now() < deadline && !interrupted) {
      pollfd none{-1, 0, 0};
      ::poll(&none, 0, 20);
    }
  };
  const auto chief_done = std::chrono::steady_clock::now();
  for (auto& t : tasks)
    if (t.id.type == "evaluator" && chief_ok_exit(*chief))
      wait_until(t, chief_done + std::chrono::milliseconds(o.evaluator_grace_ms));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(o.grace_ms);
  for (auto& t : tasks)
    wait_until(t, deadline);
  for (auto& t : tasks) {
    if (!reap(t, false)) {
      ::kill(t.pid, SIGKILL);
      reap(t, true);
    }
  }

  nlohmann::json chief_result = nullptr;
  if (!chief_json.empty())
    chief_result = nlohmann::json::parse(chief_json, nullptr, /*allow_exceptions=*/false);
  // The evaluator prints one JSON line per checkpoint it evaluated (to its log).
  nlohmann::json evaluations = nlohmann::json::array();
  if (o.evaluator) {
    std::ifstream log(log_path(run_dir, {"evaluator", 0}));
    for (std::string line; std::getline(log, line);)
      if (!line.empty() && line.front() == '{') {
        auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
        if (!j.is_discarded()) evaluations.push_back(std::move(j));
      }
  }
  nlohmann::json statuses = nlohmann::json::array();
  for (const auto& t : tasks)
    statuses.push_back(describe_status(t));
  const bool chief_ok = chief_ok_exit(*chief);
  exit_code = interrupted                 ? 128 + interrupted
              : chief_ok                  ? 0
              : chief->status.has_value() ? container_exit_code(*chief->status)
                                          : exit_permanent;
  return {{"ok", exit_code == 0},
          {"program", "troupe launch"},
          {"run_dir", run_dir},
          {"interrupted", interrupted != 0},
          {"cluster_secret", own_secret ? "made for this job" : "the caller's"},
          {"tls", *tls},
          {"chief", chief_result},
          {"tasks", statuses},
          {"restarts", restarts},
          {"injections", chaos.injections()},
          {"chaos", chaos.log()},
          {"evaluator", evaluations}};
}

}  // namespace troupe::tools
