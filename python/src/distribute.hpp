#pragma once

// The tf.distribute side of `import troupe`: a cluster from TF_CONFIG, a PS or worker task
// served until the chief ends the job, a ParameterServerStrategy for the chief. A cluster
// crosses from Python as (jobs, task type, task index); the Python classes of
// troupe.distribute hold it.

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <pybind11/pybind11.h>

#include "troupe/mirrored_strategy.hpp"
#include "troupe/strategy.hpp"

namespace troupe {
class Registry;
}

namespace troupe::python {

namespace py = pybind11;

using Jobs = std::map<std::string, std::vector<std::string>>;

/// What every task of a Python job serves and runs: the generic Keras steps and dataset,
/// and the steps C++ extensions add (include/troupe/python_extension.hpp) before serving.
Registry& worker_registry();
inline const Registry& keras_registry() {
  return worker_registry();
}

/// TF_CONFIG (or a Slurm step) as {"cluster", "task_type", "task_id", "rpc_layer"}; a
/// missing or malformed one is an InvalidArgumentError saying what is wrong.
py::dict resolve_cluster();

/// Serves task (type, index) of the cluster until the chief shuts the cluster down.
void serve_task(const Jobs& jobs, const std::string& type, int index);

/// The chief's ParameterServerStrategy: connected to every PS task when made.
class PsStrategy {
 public:
  /// `partitioner`: None, or {"type": "min_size"|"max_size"|"fixed", ...} with
  /// min_shard_bytes / max_shard_bytes / max_shards / num_shards.
  PsStrategy(const Jobs& jobs, const std::string& type, int index, const py::object& partitioner,
             int ps_replicas);
  ParameterServerStrategy& get() { return *strategy_; }
  int num_workers() const { return strategy_->num_workers(); }

 private:
  std::unique_ptr<ParameterServerStrategy> strategy_;
};

/// MultiWorkerMirroredStrategy, made by every worker's script: joins the ring of the
/// cluster's chief and worker tasks when made (waits for all of them).
class MirroredStrategy {
 public:
  /// `options`: {"communication": "auto"|"ring"|"nccl", "elastic": bool, "min_workers": int,
  /// "timeout_s": float, "connect_timeout_s": float}.
  MirroredStrategy(const Jobs& jobs, const std::string& type, int index, const py::dict& options);
  MultiWorkerMirroredStrategy& get() { return *strategy_; }
  int num_replicas_in_sync() const { return strategy_->num_replicas_in_sync(); }
  int worker_index() const { return strategy_->worker_index(); }
  bool is_chief() const { return strategy_->is_chief(); }
  /// {"reforms", "workers_lost", "workers_joined", "steps_redone"}.
  py::dict stats() const;

 private:
  std::unique_ptr<MultiWorkerMirroredStrategy> strategy_;
};

}  // namespace troupe::python
