#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tools/chaos.hpp"

namespace troupe::tools {

enum class RestartPolicy { never, on_failure, exit_code };

struct LaunchOptions {
  /// 0: a cluster of workers only (MultiWorkerMirroredStrategy), worker 0 the chief.
  int ps = 0;
  int workers = 1;
  bool evaluator = false;
  std::string run_dir;               // default: a fresh directory under /tmp
  std::vector<std::string> program;  // the job's command line, run in every task
  int grace_ms = 5000;               // how long other tasks get to exit after the chief
  /// How long an evaluator gets after the chief exited successfully to evaluate the last
  /// checkpoint and exit by itself; its JSON lines are in the result's "evaluator".
  int evaluator_grace_ms = 120000;
  std::vector<ChaosEvent> chaos;  // failures to inject, by time after launch
  /// Which failed tasks are started again on their address, named as TFJob names its
  /// restart policies:
  /// - never: none;
  /// - on_failure: a worker, PS or evaluator that is killed or exits non-zero, and a
  ///   chief killed by a signal (a chief that exits with an error has reported it;
  ///   starting it again would hide that);
  /// - exit_code: any task, the chief included, whose status is retryable
  ///   (troupe/exit_codes.hpp: 130, 137, 138, 143, or killed by SIGINT, SIGKILL or
  ///   SIGTERM); a permanent failure is final.
  RestartPolicy restart_policy = RestartPolicy::never;
  int max_restarts = 10;  // per task; after that a failure is final
  /// The host part of every task's address in TF_CONFIG: a numeric IPv4 or IPv6 address
  /// or a name of this machine ("localhost").
  std::string host = "127.0.0.1";
  /// Every TCP link of the job in TLS 1.3 (TROUPE_TLS=1 in each task's environment; also
  /// when the caller's environment has it).
  bool tls = false;
};

/// Starts chief, workers, PS (and evaluator) tasks (with no PS: workers only, worker 0
/// standing for the chief below) as local processes on free ports of `host`, each with its own
/// TF_CONFIG; writes RUN_DIR/tasks.json and one log per task; forwards the chief's output; ends
/// every process it started (by pid) when the chief exits or on SIGINT/SIGTERM; injects the `chaos`
/// events on time, logging each. Returns the result object printed as the last line;
/// `exit_code` is the chief's status as an orchestrator sees it (0, its exit code, or 128 +
/// the signal that ended it), or 128 + the signal that interrupted launch.
nlohmann::json launch(const LaunchOptions& options, int& exit_code);

/// Whether a task that ended with wait status `status` is started again under `policy`,
/// after `restarts` restarts of it (LaunchOptions::restart_policy says which).
bool should_restart(RestartPolicy policy, bool is_chief, int status, int restarts,
                    int max_restarts);

}  // namespace troupe::tools
