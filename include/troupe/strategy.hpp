#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/backend.hpp"
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
  // This task's shards of dynamic tables:
  int64_t table_rows = 0;                // rows held
  int64_t rows_admitted = 0;             // rows created
  int64_t rows_evicted = 0;              // rows removed (expired, or under max_rows)
  int64_t grads_dropped_unadmitted = 0;  // gradients of keys that had no row
  int64_t table_bytes = 0;               // the tables' memory
  int64_t snapshot_full_bytes = 0;       // the newest full snapshot's file
  int64_t snapshot_delta_bytes = 0;      // the newest delta snapshot's file (0: none)
  int64_t snapshot_updates = -1;         // updates_applied in the newest snapshot (-1: none)
  // The load of the workers' batched requests: rows and value bytes (4 per element) sent
  // back (pulls) and sent in (pushes).
  int64_t rows_pulled = 0, rows_pushed = 0, bytes_pulled = 0, bytes_pushed = 0;
  /// Failed over (replicated shards): not asked; every figure above is 0.
  bool lost = false;
};

/// An embedding table without a fixed vocabulary (core/dynamic_table.hpp): rows keyed by
/// 64-bit ids, spread over `shards` shards by a hash of the key, a row created once its key
/// is admitted. Keys without a row read as zeros and their gradients are dropped (counted).
struct DynamicTableSpec {
  int64_t width = 0;
  int64_t max_rows = 0;            // over all shards (0: no cap); split evenly between the shards
  int shards = 0;                  // 0: one per PS task
  int32_t min_count = 1;           // occurrences before a key gets a row
  float admit_probability = 1.0f;  // < 1: admit each occurrence with this probability
  int64_t ttl_steps = 0;           // evict rows not updated for this many steps (0: never)
  /// Count-min counters per hash function (4 of them, 2 bytes each, per shard); 0: the
  /// shard's cap rounded up to a power of two in [2^12, 2^20], or 2^20 without a cap.
  int64_t sketch_width = 0;
};

/// A dynamic table's rows as read_table() gives them: a key a row.
struct TableRows {
  std::vector<int64_t> keys;
  core::Tensor values;  // [keys, width]
};

struct StrategyOptions {
  /// How long to keep trying to reach each PS and worker at start-up.
  std::chrono::milliseconds connect_timeout{30000};
  /// Bound on each request to a PS from the chief.
  std::chrono::milliseconds request_timeout{30000};
  /// Copies of every shard, each on another PS task (on another host first, where the
  /// cluster's addresses say so): a primary and ps_replicas - 1 backups. Workers apply each
  /// update on every live copy before it counts as done, so when a PS task is lost its
  /// shards' backups serve at once and nothing is lost (ClusterCoordinator fails over; see
  /// docs/failure-semantics.md). 1: one copy, today's restore from snapshots. At most the
  /// number of PS tasks.
  int ps_replicas = 1;
  /// How a partitioned variable's rows are dealt to its shards (core::RowLayout): in runs,
  /// as TensorFlow does, or interleaved, row r on shard r % shards, which spreads the hot
  /// rows of a table whose ids are ranked by frequency over every PS task.
  core::RowLayout row_layout = core::RowLayout::range;
  /// Asked between tries to reach a PS task at start-up: true ends make() with a
  /// `cancelled` error (how Python's Ctrl-C ends a strategy still connecting). make() only:
  /// the strategy does not keep it.
  std::function<bool()> stop;
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
  /// The same with an optimizer's whole configuration (a Keras model's, with its
  /// hyper-parameters); it travels to the PS tasks as text (core/optimizer_config.hpp).
  core::Expected<Variable> create_variable(const std::string& name, core::Shape shape,
                                           core::Initializer init,
                                           const core::OptimizerConfig& optimizer);
  /// Sets a variable's value from the chief (a Keras file's weights): each shard its rows,
  /// on every copy of it, with its optimizer state afresh (iteration 0). A value of another
  /// shape is an invalid_argument error naming the variable.
  core::Status assign(const Variable& v, core::ConstTensorView value);
  /// A dynamic table (see DynamicTableSpec), its shards placed round-robin over the PS
  /// tasks. Workers pull and push its rows by key (StepContext::pull_rows / push_rows with
  /// keys for rows); read_rows reads them. A step of a shard's table is one push to it: its
  /// ttl counts those. A chief's backup does not hold it; PS snapshots do.
  core::Expected<Variable> create_dynamic_table(const std::string& name,
                                                const DynamicTableSpec& spec,
                                                core::Initializer init,
                                                const std::string& optimizer, float learning_rate);
  core::Expected<Variable> create_dynamic_table(const std::string& name,
                                                const DynamicTableSpec& spec,
                                                core::Initializer init,
                                                const core::OptimizerConfig& optimizer);
  /// Reads a variable's current value from its shards (for evaluation and checkpoints).
  core::Expected<core::Tensor> read(const Variable& v);
  /// Rows of a variable (indices of the full variable) from the shards holding them, for
  /// evaluating a model whose tables are too big to read whole.
  core::Expected<core::Tensor> read_rows(const Variable& v, const std::vector<int64_t>& rows);

  /// Every row of a dynamic table seen at least `min_count` times (value columns, no
  /// optimizer slots), read from its shards in pages of `page_rows` (for an export from a
  /// live job). Each page is one turn of its PS task, so serving pauses for one page's copy,
  /// not the table's. Read while workers push, each row is as of its page: a row admitted
  /// meanwhile may be missing, an evicted one may still come; no key comes twice.
  core::Expected<TableRows> read_table(const Variable& v, int32_t min_count = 0,
                                       int64_t page_rows = 16384);

  /// The variables the PS tasks hold that this strategy did not create, found from their
  /// shards' definitions, so that read(), read_rows() and read_table() reach them: for a
  /// process reading a job another process runs (troupe export --job). Every shard of each
  /// must be held exactly once across the tasks: one missing (a PS task not yet restored)
  /// or held twice is an `unavailable` error naming it.
  ///
  ///   auto vars = strategy->find_variables();  // then strategy->read((*vars)[0])
  core::Expected<std::vector<Variable>> find_variables();
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
