#include "tools/launch.hpp"
#include "tools/launch_plan.hpp"

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
#include <map>
#include <optional>

#include "core/json_text.hpp"
#include "core/subprocess.hpp"
#include "net/cluster_spec.hpp"
#include "net/host_limits.hpp"
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
  core::Subprocess process;
  std::vector<pid_t> earlier_pids;  // processes of this task that failed and were restarted
};

std::string log_path(const std::string& run_dir, const net::TaskId& id) {
  return run_dir + "/" + id.type + "-" + std::to_string(id.index) + ".log";
}

bool failed(int status) {
  return !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

bool exited_ok(const Task& t) {
  return t.process.status() && !failed(*t.process.status());
}

nlohmann::json describe_status(const Task& t) {
  nlohmann::json j{{"task", t.id.to_string()}, {"pid", t.process.pid()}};
  if (!t.earlier_pids.empty()) j["earlier_pids"] = t.earlier_pids;
  const auto& status = t.process.status();
  if (!status) {
    j["exit"] = nullptr;
  } else if (WIFEXITED(*status)) {
    j["exit"] = WEXITSTATUS(*status);
  } else if (WIFSIGNALED(*status)) {
    j["signal"] = WTERMSIG(*status);
  }
  return j;
}

// -- the plan: run directory, the job's secret and TLS choice, every task's address ----

// -- the process group: every task's process, started, restarted, listed and ended -------

class TaskGroup {
 public:
  TaskGroup(const LaunchOptions& o, const Plan& plan) : o_(o), plan_(plan) {}

  // Servers first, the chief last: it connects to them (and retries until they are up).
  void start_all() {
    const auto ids = plan_.spec.tasks();
    tasks_.reserve(ids.size());
    for (const auto& id : ids)
      if (!(id == plan_.lead)) tasks_.push_back(Task{id, start(id, false), {}});
    tasks_.push_back(Task{plan_.lead, start(plan_.lead, false), {}});
    write_listing();
  }

  std::vector<Task>& tasks() { return tasks_; }
  Task& chief() { return tasks_.back(); }
  int restarts() const { return restarts_; }

  pid_t pid_of(const net::TaskId& id) const {
    for (const auto& t : tasks_)
      if (t.id == id) return t.process.pid();
    return -1;
  }

  // Whether `t`, ended, is started again (never once launch is interrupted).
  bool should_restart(const Task& t) const {
    return !interrupted &&
           tools::should_restart(o_.restart_policy, &t == &tasks_.back(), *t.process.status(),
                                 static_cast<int>(t.earlier_pids.size()), o_.max_restarts);
  }

  // A failed task is started again at once on the same address.
  void restart(Task& t, std::chrono::steady_clock::time_point t0) {
    const pid_t old = t.process.pid();
    t.earlier_pids.push_back(old);
    t.process = start(t.id, /*append=*/true);
    ++restarts_;
    const double at_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::cerr << "troupe launch: restarted " << t.id.to_string() << " (pid " << old << " -> "
              << t.process.pid() << ") at " << at_s << " s" << std::endl;
    write_listing();
  }

  void restart_failed_servers(std::chrono::steady_clock::time_point t0) {
    for (auto& t : tasks_)
      if (&t != &chief() && !t.process.running() && t.process.status() && should_restart(t))
        restart(t, t0);
  }

  // The chief has ended: the others get a grace period to exit by themselves (an evaluator,
  // after a successful chief, its own longer one to evaluate the last checkpoint), then
  // they are ended by pid.
  void end_servers() {
    const auto wait_until = [&](Task& t, std::chrono::steady_clock::time_point deadline) {
      while (t.process.running() && std::chrono::steady_clock::now() < deadline && !interrupted) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            deadline - std::chrono::steady_clock::now());
        t.process.wait_exit(std::min(left, std::chrono::milliseconds(20)));
      }
    };
    const auto chief_done = std::chrono::steady_clock::now();
    for (auto& t : tasks_)
      if (t.id.type == "evaluator" && exited_ok(chief()))
        wait_until(t, chief_done + std::chrono::milliseconds(o_.evaluator_grace_ms));
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(o_.grace_ms);
    for (auto& t : tasks_)
      wait_until(t, deadline);
    for (auto& t : tasks_)
      if (t.process.running()) {
        t.process.signal(SIGKILL);
        t.process.wait();
      }
  }

 private:
  // Starts the task's process with its TF_CONFIG: the chief's stdout to a pipe, every other
  // output to the task's log, appended to on a restart.
  core::Subprocess start(const net::TaskId& id, bool append) {
    core::SpawnOptions s;
    s.argv = o_.program;
    s.search_path = true;
    for (char** e = environ; *e; ++e)
      if (std::strncmp(*e, "TF_CONFIG=", 10) != 0 && std::strncmp(*e, "TROUPE_RUN_DIR=", 15) != 0)
        s.env.emplace_back(*e);
    s.env.push_back("TF_CONFIG=" + net::TFConfigClusterResolver::render(plan_.spec, id));
    // A directory every task of the run shares: programs keep checkpoints and logs there.
    s.env.push_back("TROUPE_RUN_DIR=" + plan_.run_dir);
    s.out = id == plan_.lead ? core::SpawnOptions::Output::pipe : core::SpawnOptions::Output::file;
    s.err = core::SpawnOptions::Output::file;
    s.out_file = s.err_file = log_path(plan_.run_dir, id);
    s.append = append;
    s.own_process_group = true;
    auto p = core::Subprocess::spawn(s);
    if (!p) {
      std::cerr << "troupe launch: cannot start " << id.to_string() << ": " << p.error().to_string()
                << std::endl;
      return {};
    }
    return std::move(*p);
  }

  // tasks.json names every task's address and current pid (rewritten on each restart).
  void write_listing() const {
    nlohmann::json listing = nlohmann::json::array();
    for (const auto& t : tasks_)
      listing.push_back({{"type", t.id.type},
                         {"index", t.id.index},
                         {"address", plan_.spec.address(t.id)},
                         {"pid", t.process.pid()}});
    const std::string path = plan_.run_dir + "/tasks.json", tmp = path + ".tmp";
    std::ofstream(tmp) << troupe::core::json_text(listing, 2) << "\n";
    std::error_code ec;
    std::filesystem::rename(tmp, path, ec);
  }

  const LaunchOptions& o_;
  const Plan& plan_;
  std::vector<Task> tasks_;  // the chief last
  int restarts_ = 0;
};

}  // namespace

bool should_restart(RestartPolicy policy, bool is_chief, int status, int restarts,
                    int max_restarts) {
  if (restarts >= max_restarts) return false;
  switch (policy) {
    case RestartPolicy::never:
      return false;
    case RestartPolicy::on_failure:
      // A chief that exited with an error has reported it: starting it again would hide it.
      return is_chief ? WIFSIGNALED(status) : failed(status);
    case RestartPolicy::exit_code:
      return retryable_exit_code(container_exit_code(status));
  }
  return false;
}

nlohmann::json launch(const LaunchOptions& o, int& exit_code) {
  exit_code = 1;
  // The tasks inherit the raised limit; each raises its own as well (net::configure), as
  // Slurm's and TFJob's tasks are not started by launch. The run's port leases hold one
  // descriptor per task already.
  const auto raised = net::raise_descriptor_limit();
  EnvUndo undo;
  auto plan = make_plan(o, undo);
  if (!plan) return {{"ok", false}, {"error", plan.error().to_string()}};
  // Every task runs on this host: what the job needs of it, said before it starts.
  const auto job_tasks = plan->spec.tasks().size();
  const auto host_limits = net::describe(
      raised,
      net::host_needs(job_tasks, static_cast<uint64_t>(plan->spec.num_tasks("ps")), job_tasks),
      net::read_host_limits());
  for (const auto& s : host_limits["shortfalls"])
    std::cerr << "troupe launch: the system's limits may be too low: " << s.get<std::string>()
              << std::endl;

  struct sigaction sa {};
  sa.sa_handler = on_signal;
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);

  TaskGroup group(o, *plan);
  group.start_all();
  Task& chief = group.chief();
  std::cerr << "troupe launch: " << group.tasks().size()
            << " tasks started, logs and tasks.json in " << plan->run_dir << std::endl;
  const auto t0 = std::chrono::steady_clock::now();
  ChaosInjector chaos(
      o.chaos, [&](const net::TaskId& id) { return group.pid_of(id); }, t0);

  // Forward the chief's output line by line, and keep its last JSON line; meanwhile inject
  // the chaos events on time and restart failed servers as the policy says.
  std::string pending, chief_json;
  std::ofstream chief_out(plan->run_dir + "/" + plan->lead.type + "-" +
                          std::to_string(plan->lead.index) + ".stdout");
  char buf[65536];
  while (!interrupted && chief.process.out_fd() >= 0) {
    chaos.run_due();
    group.restart_failed_servers(t0);
    int wait_ms = o.restart_policy != RestartPolicy::never ? 20 : 200;
    if (auto next = chaos.next_due())
      wait_ms = static_cast<int>(std::clamp<int64_t>(next->count(), 0, wait_ms));
    pollfd p{chief.process.out_fd(), POLLIN, 0};
    const int r = ::poll(&p, 1, wait_ms);
    if (r <= 0) continue;  // a timeout, or EINTR (the loop looks at `interrupted`)
    const ssize_t n = ::read(chief.process.out_fd(), buf, sizeof buf);
    if (n <= 0) {
      // The chief's output ended: it exited, or a signal ended it.
      chief.process.close_out();
      chief.process.wait();
      if (group.should_restart(chief)) {
        pending.clear();  // a partial line of the process that died
        group.restart(chief, t0);
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
  chief.process.close_out();
  if (interrupted) chief.process.signal(SIGTERM);
  chief.process.wait();
  chaos.resume_all();  // a task still stopped when the chief ends is resumed to exit
  group.end_servers();

  nlohmann::json chief_result = nullptr;
  if (!chief_json.empty())
    chief_result = nlohmann::json::parse(chief_json, nullptr, /*allow_exceptions=*/false);
  // The evaluator prints one JSON line per checkpoint it evaluated (to its log).
  nlohmann::json evaluations = nlohmann::json::array();
  if (o.evaluator) {
    std::ifstream log(log_path(plan->run_dir, {"evaluator", 0}));
    for (std::string line; std::getline(log, line);)
      if (!line.empty() && line.front() == '{') {
        auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
        if (!j.is_discarded()) evaluations.push_back(std::move(j));
      }
  }
  nlohmann::json statuses = nlohmann::json::array();
  for (const auto& t : group.tasks())
    statuses.push_back(describe_status(t));
  const auto& chief_status = chief.process.status();
  exit_code = interrupted        ? 128 + interrupted
              : exited_ok(chief) ? 0
              : chief_status     ? container_exit_code(*chief_status)
                                 : exit_permanent;
  return {{"ok", exit_code == 0},
          {"program", "troupe launch"},
          {"run_dir", plan->run_dir},
          {"interrupted", interrupted != 0},
          {"cluster_secret", plan->own_secret ? "made for this job" : "the caller's"},
          {"tls", plan->tls},
          {"chief", chief_result},
          {"tasks", statuses},
          {"restarts", group.restarts()},
          {"injections", chaos.injections()},
          {"chaos", chaos.log()},
          {"evaluator", evaluations},
          {"host_limits", host_limits}};
}

}  // namespace troupe::tools
