#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "core/expected.hpp"
#include "core/partitioner.hpp"
#include "net/cluster_spec.hpp"

namespace troupe {

namespace net {
struct Placement;
}

/// A variable created in a ParameterServerStrategy: its name, shape, and shards.
struct Variable {
  std::string name;
  core::Shape shape;
  int num_shards = 1;
};

/// What one PS task reports of itself.
struct PsTaskStats {
  int64_t variables = 0;          // shards held
  int64_t pulls = 0;              // pull requests answered
  int64_t updates_applied = 0;    // pushes applied
  int64_t snapshots = 0;          // snapshots written by this process
  int64_t rss_bytes = 0;          // resident memory of the PS process
  int64_t snapshot_copy_us = 0;   // the last snapshot's copy of the shards (serving waits)
  int64_t snapshot_write_ms = 0;  // and its write to disk (off the serving thread)
  int64_t bf16_requests = 0;      // requests whose tensors came as bf16 (--wire-dtype bf16)
};

struct StrategyOptions {
  /// How long to keep trying to reach each PS and worker at start-up.
  std::chrono::milliseconds connect_timeout{30000};
  /// Bound on each request to a PS from the chief.
  std::chrono::milliseconds request_timeout{30000};
};

/// TensorFlow's ParameterServerStrategy, on the chief: variables live on the PS tasks,
/// placed round-robin, or split by a partitioner across them.
///
///   ParameterServerStrategy strategy(resolver, std::make_shared<FixedShardsPartitioner>(2));
///   auto w = strategy.create_variable("dense/kernel", {784, 128},
///                                     {core::Initializer::Kind::glorot_uniform, 0, 1}, "sgd",
///                                     0.1f);
class ParameterServerStrategy {
 public:
  using Options = StrategyOptions;

  /// Connects to every PS task of the cluster; an unreachable one is an `unavailable` error
  /// naming it (see make()).
  static core::Expected<std::unique_ptr<ParameterServerStrategy>> make(
      const net::ClusterResolver& resolver,
      std::shared_ptr<const core::Partitioner> partitioner = nullptr, StrategyOptions options = {});
  ~ParameterServerStrategy();

  /// Creates a variable on the PS tasks (each shard with its optimizer state).
  core::Expected<Variable> create_variable(const std::string& name, core::Shape shape,
                                           core::Initializer init, const std::string& optimizer,
                                           float learning_rate);
  /// Reads a variable's current value from its shards (for evaluation and checkpoints).
  core::Expected<core::Tensor> read(const Variable& v);
  /// Rows of a variable (indices of the full variable) from the shards holding them, for
  /// evaluating a model whose tables are too big to read whole.
  core::Expected<core::Tensor> read_rows(const Variable& v, const std::vector<int64_t>& rows);

  /// Each PS task's counters and resident memory, in task order.
  core::Expected<std::vector<PsTaskStats>> ps_stats();

  const net::ClusterSpec& cluster_spec() const;
  int num_workers() const;

  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  explicit ParameterServerStrategy(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace troupe
