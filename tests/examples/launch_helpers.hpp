#pragma once

// For tests that run shipped programs under troupe launch.

#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "helpers.hpp"
#include "process.hpp"
#include "tools/chaos.hpp"

namespace troupe::test {

/// Every task launch listed has exited: no process with its pid is left.
inline void check_all_gone(const nlohmann::json& tasks) {
  for (const auto& t : tasks) {
    INFO(t.dump());
    CHECK(::kill(t["pid"].get<int>(), 0) != 0);  // no such process any more
  }
}

/// What the tasks of a launch in `run_dir` wrote to their logs (<task>.log), the last
/// `lines` lines of each: for the message of a check that failed.
inline std::string task_logs(const std::string& run_dir, size_t lines = 20) {
  std::string out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(run_dir, ec)) {
    if (e.path().extension() != ".log") continue;
    std::ifstream in(e.path());
    std::vector<std::string> tail;
    for (std::string line; std::getline(in, line);) {
      tail.push_back(std::move(line));
      if (tail.size() > lines) tail.erase(tail.begin());
    }
    out += "--- " + e.path().filename().string() + "\n";
    for (const auto& l : tail)
      out += l + "\n";
  }
  return out;
}

/// The last line of `in` that holds a JSON object (null when there is none).
inline nlohmann::json last_json_line_in(std::istream& in) {
  std::string line, last;
  while (std::getline(in, line))
    if (!line.empty() && line.front() == '{') last = line;
  return nlohmann::json::parse(last, nullptr, /*allow_exceptions=*/false);
}

/// The same of a file, and of a program's captured output.
inline nlohmann::json last_json_line(const std::string& path) {
  std::ifstream in(path);
  return last_json_line_in(in);
}
inline nlohmann::json last_json_line_of(const std::string& text) {
  std::istringstream in(text);
  return last_json_line_in(in);
}

/// Waits (at most `timeout`) until `dir` holds a checkpoint file `prefix`*.tckpt, then
/// kills `task` of the launch in `run_dir` with SIGKILL, by the pid tasks.json lists,
/// through the C++ chaos API. Returns the killed pid.
inline pid_t kill_task_after_checkpoint(const std::string& run_dir, const std::string& dir,
                                        const std::string& prefix, const std::string& task,
                                        std::chrono::seconds timeout) {
  std::filesystem::create_directories(dir);
  auto saved = [&] {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir, ec))
      if (e.path().filename().string().rfind(prefix, 0) == 0 && e.path().extension() == ".tckpt")
        return true;
    return false;
  };
  REQUIRE(wait_for_file_in(dir, saved, timeout));
  auto pids = tools::read_task_pids(run_dir);
  REQUIRE(pids.ok());
  tools::ChaosInjector chaos({tools::parse_chaos("kill:" + task + "@0s").value()},
                             [&](const net::TaskId& t) { return pids->at(t.to_string()); });
  REQUIRE(chaos.run_due() == 1);
  return pids->at(task);
}

/// The chief killed once `dir` holds its first backup (backup-*.tckpt).
inline pid_t kill_chief_after_first_backup(const std::string& run_dir, const std::string& dir,
                                           std::chrono::seconds timeout) {
  return kill_task_after_checkpoint(run_dir, dir, "backup-", "chief:0", timeout);
}

/// Starts `launch_command` (writing to `out`), waits until `checkpoint_dir` holds a
/// checkpoint ckpt-*.tckpt, kills `task` with SIGKILL by the pid tasks.json lists, and
/// waits for launch to end. Returns launch's JSON line, after checking that no process it
/// started is left.
inline nlohmann::json run_killing_task(const std::string& launch_command,
                                       const std::string& run_dir,
                                       const std::string& checkpoint_dir, const std::string& out,
                                       const std::string& task) {
  using namespace std::chrono_literals;
  ChildProcess launch({"/bin/sh", "-c", "exec " + launch_command + " > " + out}, {});
  kill_task_after_checkpoint(run_dir, checkpoint_dir, "ckpt-", task, 60s);
  auto status = launch.wait_exit(120s);
  REQUIRE(status.has_value());
  INFO(launch.captured_stderr());
  auto j = last_json_line(out);
  REQUIRE(j.is_object());
  check_all_gone(j["tasks"]);
  return j;
}

struct ChiefKilledRun {
  nlohmann::json result;  // troupe launch's JSON line
  pid_t first_chief = -1;
};

/// Runs `launch_command` (a troupe launch with --restart-failed and --run-dir `run_dir`)
/// with its output in `out`, kills its chief once `backup_dir` holds a backup, and waits
/// for launch to end. Checks that launch succeeded, restarted the chief once, and that the
/// restarted chief finished; returns the result for the program's own checks.
inline ChiefKilledRun run_killing_chief(const std::string& launch_command,
                                        const std::string& run_dir, const std::string& backup_dir,
                                        const std::string& out) {
  using namespace std::chrono_literals;
  std::filesystem::create_directories(backup_dir);
  ChildProcess launch({"/bin/sh", "-c", "exec " + launch_command + " > " + out}, {});
  ChiefKilledRun run;
  run.first_chief = kill_chief_after_first_backup(run_dir, backup_dir, 60s);
  auto status = launch.wait_exit(120s);
  REQUIRE(status.has_value());
  INFO(launch.captured_stderr());
  CHECK((WIFEXITED(*status) && WEXITSTATUS(*status) == 0));
  run.result = last_json_line(out);
  INFO(run.result.dump());
  REQUIRE(run.result.is_object());
  CHECK(run.result["restarts"] == 1);
  REQUIRE(run.result["chief"].is_object());
  CHECK(run.result["chief"]["ok"] == true);
  CHECK(::kill(run.first_chief, 0) != 0);
  check_all_gone(run.result["tasks"]);
  return run;
}

}  // namespace troupe::test
