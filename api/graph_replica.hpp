#pragma once

// A Keras model's replica in one process (not public): its layer graph with its weights,
// its compiled objective, and a step on a batch whose tables' rows come from wherever the
// caller keeps them (a table held here, the PS tasks). Model::State and the workers' steps
// are built on it (api/model.cpp, api/keras_steps.cpp).

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/graph/objective.hpp"
#include "core/keras/model_file.hpp"
#include "core/loss_scale.hpp"
#include "troupe/fit.hpp"
#include "troupe/keras.hpp"
#include "troupe/model.hpp"
#include "troupe/registry.hpp"

namespace troupe::detail {

struct GraphReplica {
  core::keras::LoadedModel loaded;
  std::unique_ptr<core::graph::Objective> objective;
  /// Per graph weight (Graph::weights() order): its variable's name (its path,
  /// "dense/kernel"), whether it is an embedding table, a dynamic one, and whether it gets
  /// gradients (trainable) or is updated by the layer itself (a BatchNormalization's
  /// moving statistics).
  std::vector<std::string> names;
  std::vector<bool> table, keyed, trains;
  /// The weights that are not tables (what a worker pulls and pushes whole) and their
  /// names, and the tables' names in tables() order.
  std::vector<size_t> dense;
  std::vector<std::string> dense_names, table_names;
  /// The values of the non-trainable weights before a step, to push their change.
  std::vector<core::Tensor> before;
  std::vector<core::Tensor> host;  // gradients and changes copied to the host
  /// A dynamic table held here (set from a checkpoint): the row of each key, per weight.
  std::map<size_t, std::unordered_map<int64_t, int64_t>> row_of;
  core::Device device;
  uint64_t seed = 1;
  uint64_t steps = 0;
  /// Under mixed_float16 (set by place()): the dynamic loss scale of this replica's steps.
  std::optional<core::LossScale> loss_scale;

  core::graph::Graph& graph() { return *loaded.model.graph; }

  /// Reads the model from `source` and compiles it (options.compile_json, or the file's
  /// compile_config): an error names the file and what is not supported.
  /// `worker_copy`: `source` may be the chief's copy without its tables
  /// (worker_keras_source), as a parameter-server worker installs it.
  static core::Expected<std::unique_ptr<GraphReplica>> make(const KerasSource& source,
                                                            const KerasOptions& options,
                                                            bool worker_copy = false);

  /// Moves the graph to `device` ("cpu", "cuda" for this worker's GPU by its local rank,
  /// "cuda:N") computing in `precision` (troupe::select_device / select_precision), with a
  /// loss scale where the precision needs one; an error names the device and what was seen.
  core::Status place(const std::string& device, const std::string& precision);
  /// After a training run() under loss scaling: whether its gradients (the trainable dense
  /// weights', the tables' rows') are finite, then unscaled; when not, the step is skipped
  /// (nothing to push) and the scale lowered. True without loss scaling.
  bool finish_scaled_step();

  /// The rows of every table the batch reads, one tensor per table in graph tables() order
  /// for its `ids`, on any device (all at once: a PS job fetches them in one round trip).
  using RowsFn = std::function<core::Expected<std::vector<core::Tensor>>(
      const std::vector<core::graph::TableUse>& tables)>;
  /// A RowsFn that asks `rows(t, ids)` table by table.
  static RowsFn each_table(
      std::function<core::Expected<core::Tensor>(size_t t, const std::vector<int64_t>& ids)> rows);

  /// One batch fed, its tables' rows fetched and the forward pass run (labels not needed:
  /// inference); the outputs are then graph().output(i). Errors name what does not fit.
  core::Status forward(const core::Batch& batch, bool train, const RowsFn& rows);

  /// One batch: fed, its tables' rows fetched, forward, the objective (with the backward
  /// pass when `train`, the gradients times `loss_scale`, `weight_done` called as
  /// Graph::backward says). The batch's loss, examples and metric states are returned.
  core::Expected<BatchStats> run(const core::Batch& batch, bool train, const RowsFn& rows,
                                 float loss_scale = 1.0f,
                                 const std::function<void(size_t)>& weight_done = {});

  /// For a non-trainable weight w: its value before the last run() minus its value now (a
  /// BatchNormalization's moving statistics moved by the step), on the host. A PS holds
  /// such a variable with SGD at rate 1, so pushing this moves it by the same amount.
  core::ConstTensorView change(size_t w);
  /// Weight w's gradient on the host (a table's: its rows', for tables()[t].ids).
  core::ConstTensorView host_gradient(size_t w);

  /// The graph's table uses of the last run (ids and row gradients).
  std::vector<core::graph::TableUse>& tables() { return graph().tables(); }
  /// The index in tables() of weight w, or -1.
  int table_of(size_t w) const;
};

/// A Keras model's rows of table t for `ids` from the tables this replica holds (a key
/// without a row, in a dynamic table set from a checkpoint, reads as zeros); an error where
/// the table is not held here.
core::Expected<core::Tensor> held_rows(GraphReplica& g, size_t t, const std::vector<int64_t>& ids);
/// held_rows for every table.
GraphReplica::RowsFn held_tables(GraphReplica& g);

/// The model's data: its inputs, then its outputs' label columns (keras_feature_specs).
std::vector<core::FeatureSpec> feature_specs(const GraphReplica& r);

/// A parameter-server worker's step of a Keras graph on one batch: the dense variables
/// pulled whole (trainable or not), every table's rows of the batch in one round trip per
/// PS task; forward, and when `train` the backward pass with the gradients (a
/// non-trainable variable's change, the tables' row gradients) pushed, unless a
/// loss-scaled step overflowed (finish_scaled_step). Its stats are the step's value.
/// (api/keras_steps.cpp)
core::Expected<BatchStats> worker_step(StepContext& ctx, GraphReplica& r, const core::Batch& batch,
                                       bool train);

/// worker_step of validation batch `index` of `batches` (an out_of_range error past them).
core::Expected<BatchStats> validation_step(StepContext& ctx, GraphReplica& r,
                                           const std::vector<core::Batch>& batches, int64_t index);

/// Every batch of job.validation, in order (the job's format and batch, the last batch
/// smaller): what the chief counts and a worker's "keras/validate" step indexes.
core::Expected<std::vector<core::Batch>> read_validation(const KerasJob& job,
                                                         const GraphReplica& r);

/// Keras's History values of `stats` (the model's compiled names), with `prefix` ("val_").
Logs graph_logs(const GraphReplica& r, const BatchStats& stats, const std::string& prefix = "");

}  // namespace troupe::detail
