#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/expected.hpp"
#include "net/cluster_spec.hpp"

namespace troupe::tools {

/// One failure to inject into a local cluster, parsed from
///   ACTION:TYPE:INDEX@TIME[+DURATION]
/// ACTION is `kill` (SIGKILL) or `stop` (SIGSTOP, then SIGCONT after DURATION); TYPE and
/// INDEX name a task; TIME and DURATION are seconds after launch, written `1.5s` or
/// `800ms`. Examples: `kill:worker:1@5s`, `stop:worker:0@3s+2s`, `kill:ps:0@10s`.
struct ChaosEvent {
  enum class Action { kill, stop };
  Action action = Action::kill;
  net::TaskId task;
  std::chrono::milliseconds at{0};
  std::chrono::milliseconds duration{0};  // stop only

  std::string to_string() const;
};

/// Parses one event; a malformed spec is an invalid_argument error quoting it.
core::Expected<ChaosEvent> parse_chaos(const std::string& spec);

/// Carries out ChaosEvents against processes on time: `troupe launch --chaos` runs one, and
/// tests drive one against the processes they started. Each signal is logged on stderr
/// and in log(). `pid_of` is asked at the moment of each injection, so a task restarted
/// since the start is hit in its current process.
///
///   ChaosInjector chaos({parse_chaos("stop:worker:1@0s+1.5s").value()},
///                       [&](const net::TaskId& t) { return worker_pids[t.index]; });
///   chaos.run_until_done(10s);  // or call run_due() from an event loop
class ChaosInjector {
 public:
  using Clock = std::chrono::steady_clock;
  using PidOf = std::function<pid_t(const net::TaskId&)>;

  /// Event times count from `start`.
  ChaosInjector(std::vector<ChaosEvent> events, PidOf pid_of,
                Clock::time_point start = Clock::now());
  /// Resumes every process it stopped and has not resumed yet.
  ~ChaosInjector();
  ChaosInjector(const ChaosInjector&) = delete;
  ChaosInjector& operator=(const ChaosInjector&) = delete;

  /// Sends every signal that is due (kills, stops, and the SIGCONT ending a stop); returns
  /// how many. A task without a process (pid_of gives <= 0) is logged as missed.
  int run_due();
  /// Time until the next signal is due (zero when overdue); nullopt when none is left.
  std::optional<std::chrono::milliseconds> next_due() const;
  /// Runs every event on time, waiting in between; returns false when `limit` passed first.
  bool run_until_done(std::chrono::milliseconds limit);
  /// Resumes every stopped process now (a run ending before a stop's duration is over).
  void resume_all();

  /// {"action": "kill"|"stop"|"cont"|"missed", "task", "pid", "at_s"} for each signal.
  const nlohmann::json& log() const { return log_; }
  /// Kills and stops sent (resumes not counted).
  int injections() const { return injections_; }

 private:
  struct Due {
    Clock::time_point at;
    ChaosEvent event;
    bool resume = false;
    pid_t pid = -1;  // resume: the process that was stopped
  };
  void send(const Due& d);

  std::vector<Due> due_;  // sorted by time
  PidOf pid_of_;
  Clock::time_point start_;
  nlohmann::json log_ = nlohmann::json::array();
  int injections_ = 0;
};

/// A task as a `troupe launch` run directory's tasks.json lists it.
struct ListedTask {
  net::TaskId id;
  std::string address;
  pid_t pid = -1;
};

/// Every task of a run directory's tasks.json, as the launcher last wrote it (it rewrites
/// the file when it restarts a task). A missing file is `not_found`; an entry without a
/// string type, an integer index, a string address and an integer pid is `data_loss`; both
/// name the file.
core::Expected<std::vector<ListedTask>> read_task_listing(const std::string& run_dir);

/// Each task's pid from the listing ("worker:1" -> pid).
core::Expected<std::map<std::string, pid_t>> read_task_pids(const std::string& run_dir);

}  // namespace troupe::tools
