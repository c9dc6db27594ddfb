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

/// The plan for `o`: fails naming what is wrong (no tasks, a chaos event naming a task not
/// in the cluster, no free port, an unwritable run directory or secret).
core::Expected<Plan> make_plan(const LaunchOptions& o, EnvUndo& undo);

}  // namespace troupe::tools
