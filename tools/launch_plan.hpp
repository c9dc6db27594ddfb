#pragma once

// troupe launch's plan of a job, made before any task starts: its run directory, the
// job's secret (made unless the caller gave one), TLS, and a port for every task.

#include <cstdlib>
#include <string>
#include <vector>

#include "core/expected.hpp"
#include "net/cluster_spec.hpp"
#include "tools/launch.hpp"

namespace troupe::tools {

// Undoes this run's changes to the environment (the secret file's name, TLS) when launch()
// returns: they are this run's, not a later launch()'s.
struct EnvUndo {
  std::vector<const char*> names;
  ~EnvUndo() {
    for (const char* n : names)
      ::unsetenv(n);
  }
};

struct Plan {
  std::string run_dir;
  bool own_secret = false;  // made for this job, not the caller's
  bool tls = false;
  net::ClusterSpec spec;
  net::TaskId lead;  // the chief, or worker 0 in a cluster without PS tasks
};

/// Whether `dir` may hold a job's secret, logs and state: a directory (not a symbolic
/// link) owned by this user, in parents that no other user can rename it out of (each owned
/// by this user or root, and writable by others only with the sticky bit, as /tmp).
/// `tighten`: one that others may read or write is made 0700 (else refused): another
/// local user gets nothing from a job's files. Errors are permission_denied naming the
/// directory and what is wrong.
core::Status guard_run_dir(const std::string& dir, bool tighten);

/// The job's secret file in `run_dir`, checked as a launch wrote it: a regular file (not
/// a link), this user's, readable by nobody else. Errors are permission_denied naming it.
core::Status guard_secret_file(const std::string& path);

/// The plan for `o`: fails naming what is wrong (no tasks, a chaos event naming a task not
/// in the cluster, no free port, an unwritable run directory or secret).
core::Expected<Plan> make_plan(const LaunchOptions& o, EnvUndo& undo);

}  // namespace troupe::tools
