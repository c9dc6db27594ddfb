#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/expected.hpp"

namespace troupe::net {

using core::Expected;

/// One task of a cluster: its job ("chief", "worker", "ps", "evaluator") and index.
struct TaskId {
  std::string type;
  int index = 0;

  std::string to_string() const { return type + ":" + std::to_string(index); }
  bool operator==(const TaskId& o) const { return type == o.type && index == o.index; }
  bool operator<(const TaskId& o) const { return type != o.type ? type < o.type : index < o.index; }
};

/// "host:port" split into its parts.
struct HostPort {
  std::string host;
  uint16_t port = 0;
};

/// Parses "host:port" ("[::1]:2222" for IPv6); the port must be 1..65535.
Expected<HostPort> parse_host_port(const std::string& address);

/// The jobs of a cluster and the address of each of their tasks, as tf.train.ClusterSpec.
///
///   ClusterSpec spec({{"worker", {"127.0.0.1:2222", "127.0.0.1:2223"}},
///                     {"ps", {"127.0.0.1:2224"}}});
///   spec.address({"worker", 1});   // "127.0.0.1:2223"
class ClusterSpec {
 public:
  ClusterSpec() = default;
  explicit ClusterSpec(std::map<std::string, std::vector<std::string>> jobs);

  /// Checks job names (chief, worker, ps, evaluator), addresses (host:port), that no
  /// address is used twice and that there is at most one chief.
  core::Status validate() const;

  const std::map<std::string, std::vector<std::string>>& jobs() const { return jobs_; }
  bool has_job(const std::string& job) const { return jobs_.count(job) > 0; }
  int num_tasks(const std::string& job) const;
  /// The address of a task; the task must exist.
  const std::string& address(const TaskId& task) const;
  /// Every task, in job then index order.
  std::vector<TaskId> tasks() const;

 private:
  std::map<std::string, std::vector<std::string>> jobs_;
};

/// `task`'s rank among the compute tasks (chief, then workers, in index order) whose
/// address names the same host, as Horovod's local_rank: every worker of a host takes its
/// own GPU by it. Loopback names (localhost, 127.0.0.1, ::1) are one host. -1 when `task`
/// is not a chief or worker.
int local_rank(const ClusterSpec& spec, const TaskId& task);

/// Where a process finds its cluster and its own place in it.
class ClusterResolver {
 public:
  virtual ~ClusterResolver() = default;
  virtual const ClusterSpec& cluster_spec() const = 0;
  virtual const TaskId& task() const = 0;
  virtual const std::string& rpc_layer() const = 0;
};

/// A resolver built in code, for tests and single-process use.
class SimpleClusterResolver final : public ClusterResolver {
 public:
  SimpleClusterResolver(ClusterSpec spec, TaskId task, std::string rpc_layer = "caf")
      : spec_(std::move(spec)), task_(std::move(task)), rpc_layer_(std::move(rpc_layer)) {}
  const ClusterSpec& cluster_spec() const override { return spec_; }
  const TaskId& task() const override { return task_; }
  const std::string& rpc_layer() const override { return rpc_layer_; }

 private:
  ClusterSpec spec_;
  TaskId task_;
  std::string rpc_layer_;
};

/// Reads TF_CONFIG as TensorFlow and Kubeflow's TFJob write it:
///
///   {"cluster": {"chief": ["host:port"], "worker": [...], "ps": [...]},
///    "task": {"type": "worker", "index": 0}, "rpc_layer": "grpc"}
///
/// Malformed JSON, a missing or unknown task, an index out of range, an unknown job,
/// a bad or repeated address are invalid_argument errors that say what is wrong and quote
/// the offending part.
class TFConfigClusterResolver final : public ClusterResolver {
 public:
  /// From the TF_CONFIG environment variable. Without one, inside a Slurm job step
  /// (SLURM_PROCID set), the step's cluster (net/slurm.hpp; its jobs from
  /// TROUPE_SLURM_JOBS, else `slurm_jobs` of the number of tasks, else every task a
  /// worker), which is then also set as TF_CONFIG. Neither is an error.
  static Expected<TFConfigClusterResolver> from_env(
      std::map<std::string, int> (*slurm_jobs)(int) = nullptr);
  /// From a TF_CONFIG text.
  static Expected<TFConfigClusterResolver> parse(const std::string& tf_config);

  const ClusterSpec& cluster_spec() const override { return spec_; }
  const TaskId& task() const override { return task_; }
  const std::string& rpc_layer() const override { return rpc_layer_; }

  /// Renders a TF_CONFIG text for `task` of `spec` (what `troupe launch` sets).
  static std::string render(const ClusterSpec& spec, const TaskId& task);

 private:
  TFConfigClusterResolver() = default;
  /// parse() once the text is known to be UTF-8; nlohmann's exceptions pass through.
  static Expected<TFConfigClusterResolver> parse_json(const std::string& tf_config);
  ClusterSpec spec_;
  TaskId task_;
  std::string rpc_layer_;
};

}  // namespace troupe::net
