#pragma once

// The cluster of a Slurm job step, with TensorFlow's SlurmClusterResolver semantics:
// SLURM_PROCID is the task's rank; SLURM_STEP_NODELIST (a hostlist such as
// "n[1-3,07],m5") and SLURM_STEP_TASKS_PER_NODE (such as "2(x3),1") say which nodes run
// how many tasks; each node's tasks listen on port_base, port_base + 1, ...; tasks are
// numbered over the nodes sorted by name, and the jobs, sorted by name, take consecutive
// ranks ({"chief":1,"ps":2,"worker":2}: rank 0 the chief, 1-2 the PS tasks, 3-4 workers).
// The jobs must add up to the step's tasks.

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "net/cluster_spec.hpp"

namespace troupe::net {

/// Environment variables: the jobs as a JSON object ({"chief":1,"ps":2,"worker":2}) and
/// the first port of each node.
inline constexpr const char* slurm_jobs_env = "TROUPE_SLURM_JOBS";
inline constexpr const char* slurm_port_base_env = "TROUPE_SLURM_PORT_BASE";

/// "n[1-3,07],m5" -> n1 n2 n3 n07 m5: order kept, no deduplication, zero padding kept.
Expected<std::vector<std::string>> expand_hostlist(std::string_view hostlist);
/// "2(x3),1" -> 2 2 2 1.
Expected<std::vector<int>> expand_tasks_per_node(std::string_view tasks_per_node);

/// The jobs of a parameter-server program over `n` tasks when none are given: one chief,
/// (n - 1) / 2 PS tasks (at least one), the rest workers.
std::map<std::string, int> default_ps_jobs(int n);

class SlurmClusterResolver final : public ClusterResolver {
 public:
  /// From SLURM_PROCID, SLURM_STEP_NUM_TASKS (or SLURM_NTASKS), SLURM_STEP_NODELIST and
  /// SLURM_STEP_TASKS_PER_NODE; the jobs from TROUPE_SLURM_JOBS, else `default_jobs`
  /// applied to the number of tasks (null: every task a worker, as TensorFlow's);
  /// the port base from TROUPE_SLURM_PORT_BASE, else 8888. A missing or malformed
  /// variable is an invalid_argument error naming it.
  static Expected<SlurmClusterResolver> from_env(
      std::map<std::string, int> (*default_jobs)(int) = nullptr);
  /// The same from explicit values.
  static Expected<SlurmClusterResolver> make(int rank, const std::string& nodelist,
                                             const std::string& tasks_per_node,
                                             const std::map<std::string, int>& jobs,
                                             int port_base = 8888);

  const ClusterSpec& cluster_spec() const override { return spec_; }
  const TaskId& task() const override { return task_; }
  const std::string& rpc_layer() const override { return rpc_layer_; }

 private:
  SlurmClusterResolver() = default;
  ClusterSpec spec_;
  TaskId task_;
  std::string rpc_layer_ = "caf";
};

}  // namespace troupe::net
