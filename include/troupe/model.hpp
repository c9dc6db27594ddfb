#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <msgpack.hpp>

#include "core/checkpoint/checkpoint.hpp"
#include "core/data/example.hpp"
#include "core/device.hpp"
#include "core/expected.hpp"
#include "core/graph/metric_state.hpp"
#include "core/loss_scale.hpp"
#include "core/metrics.hpp"
#include "core/parameter.hpp"
#include "troupe/coordinator_types.hpp"
#include "troupe/keras.hpp"
#include "troupe/strategy.hpp"

namespace troupe {

class ClusterCoordinator;
class ParameterServerStrategy;
class Registry;

/// What a model is, the same in every process of a job: a Keras graph (a .keras file,
/// to_json()'s JSON, or a built-in model's JSON such as core::keras::classifier_model_config's
/// or ctr_model_config's), how to train it beyond what its file says, where it computes, and
/// its validation data.
struct ModelSpec {
  /// Names the model's registered steps ("<name>/train", "<name>/evaluate",
  /// "<name>/validate"). A model without a name is "keras": it runs the generic steps of
  /// register_keras (troupe train's and Python's jobs).
  std::string name;
  /// Where each process's replica computes and in which policy (troupe/devices.hpp):
  /// "cpu", "cuda" (a worker's GPU by its local rank) or "cuda:N"; "float32", "tf32",
  /// "mixed_bfloat16", "mixed_float16" (dynamic loss scaling, a PS worker its own) or "auto".
  /// Variables on parameter servers stay float32 on their hosts; workers copy pulled
  /// values to their device and gradients back.
  std::string device = "cpu";
  std::string precision = "float32";
  /// The model (troupe/keras.hpp): its layers and operations, initial weights, loss,
  /// metrics and optimizer from the file. Every variable lives on the PS tasks under a
  /// ParameterServerStrategy: each Embedding's table sharded by the strategy's partitioner
  /// (or a dynamic table, KerasOptions::dynamic_tables) and read and updated by the rows a
  /// batch uses, the other weights whole. Attached to a strategy, the chief never holds a
  /// table either: evaluate() reads each batch's rows from the PS tasks and read_weights()
  /// (what ModelCheckpoint saves) reads the tables only for the checkpoint.
  std::shared_ptr<const KerasSource> keras;
  KerasOptions keras_options;
  /// The validation batches (named columns), loaded once on the chief when evaluate()
  /// first runs, and on each worker when it first runs "<name>/validate"
  /// (evaluate_distributed(): the same batches, in the same order, in every process).
  std::function<core::Expected<std::vector<core::Batch>>()> eval_batches;
};

/// Sums over some batches: what a step returns to the chief. Sums merge exactly, whatever
/// the order.
struct BatchStats {
  double loss_sum = 0.0;  // mean batch loss times batch size, summed (the weighted loss)
  int64_t examples = 0;
  int64_t batches = 0;
  /// The state of each compiled History value (Model::logs() reads them).
  core::graph::MetricStates metrics;

  BatchStats() = default;
  BatchStats(double loss_sum_, int64_t examples_, int64_t batches_)
      : loss_sum(loss_sum_), examples(examples_), batches(batches_) {}

  void merge(const BatchStats& o) {
    loss_sum += o.loss_sum;
    examples += o.examples;
    batches += o.batches;
    if (metrics.values.empty())
      metrics = o.metrics;
    else if (!o.metrics.values.empty())
      (void)metrics.merge(o.metrics);  // one model's states: the same kinds in one order
  }
  /// Counts of `times` batches like this one (a closure's last step standing for all).
  void scale(int64_t times) {
    loss_sum *= static_cast<double>(times);
    examples *= times;
    for (auto& m : metrics.values) {
      m.total *= static_cast<double>(times);
      m.count *= times;
      for (auto& c : m.positives)
        c *= times;
      for (auto& c : m.negatives)
        c *= times;
    }
  }
  double loss() const { return examples == 0 ? 0.0 : loss_sum / static_cast<double>(examples); }
  MSGPACK_DEFINE(loss_sum, examples, batches, metrics);
};

/// Registers the model's steps in every process's registry (before serve()):
///   "<name>/train"(PerWorkerDataset) pulls the variables, trains on the worker's next
///     batch and pushes the gradients; returns the batch's BatchStats;
///   "<name>/evaluate"(int64 batch) pulls the variables and evaluates evaluation batch
///     `batch`; returns its BatchStats.
/// A Keras model (ModelSpec::keras, named) gets register_keras's steps under its name, on
/// datasets of batches of named columns (dense variables pulled whole, a batch's table rows):
///   "<name>/train"(PerWorkerDataset) as above;
///   "<name>/evaluate"(PerWorkerDataset) one batch of the worker's iterator, nothing pushed;
///   "<name>/validate"(int64 batch) batch `batch` of ModelSpec::eval_batches.
/// Each worker keeps one replica of the layers; steps on a worker run one at a time.
void register_model(Registry& registry, const ModelSpec& spec);

/// A model on the chief (or in a single process): its layers with their current values,
/// and, once attached to a ParameterServerStrategy, its variables on the PS tasks and the
/// coordinator fit() and evaluate_distributed() use (made once, kept, as Keras keeps
/// model._cluster_coordinator).
class Model {
 public:
  explicit Model(ModelSpec spec);
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const ModelSpec& spec() const;
  std::vector<core::Parameter>& parameters();

  /// Creates the model's variables on the PS tasks (once; a second strategy is an error).
  core::Status attach(ParameterServerStrategy& strategy);
  ParameterServerStrategy* strategy();
  /// Attached: the model's variables on the PS tasks, in parameters() order; empty
  /// otherwise.
  const std::vector<Variable>& variables() const;
  /// The coordinator, made with `options` on the first call; the same one afterwards.
  core::Expected<ClusterCoordinator*> coordinator(const CoordinatorOptions& options = {});
  /// The coordinator if one was made (to shut the cluster down at the end).
  ClusterCoordinator* coordinator_if_made();

  /// Attached: reads the variables from the PS tasks into the local graph (the tables stay
  /// on the PS tasks: only the dense variables come).
  core::Status pull();
  /// The local graph's values, one tensor per weight path (a dynamic table: the rows
  /// set_weights() gave, their keys in ints["<path>/keys"]). A table not held here is not
  /// among them: read_weights() reads it.
  core::Checkpoint weights();
  /// Attached: pull() and the dense values, with every table read from the PS tasks (a fixed
  /// one whole, a dynamic one in pages by ParameterServerStrategy::read_table; the chief holds
  /// it only for the checkpoint). Otherwise weights().
  core::Expected<core::Checkpoint> read_weights();
  /// Sets the local graph from a checkpoint's tensors: every weight must be there with its
  /// shape (a dynamic table: any number of rows of its width, a distinct key a row), or it is
  /// an invalid_argument error naming it and nothing changes. A checkpoint of the built-in
  /// CTR model's variables as ctr_fit wrote them before the model was a Keras graph (bias,
  /// dense_w, dnn/dense_N/..., the table `embedding`) is migrated to the graph's weights
  /// first (core::keras::migrate_ctr_checkpoint), for the built-in CTR form only.
  core::Status set_weights(const core::Checkpoint& ckpt);

  /// Evaluates the local graph on the validation batches (attached: pulls first; the tables'
  /// rows are read from the PS tasks a batch at a time).
  core::Expected<BatchStats> evaluate();
  /// Evaluates through the coordinator: one "<name>/validate" closure per validation batch
  /// on the workers, each batch's result counted exactly once (a closure retried after a
  /// lost worker computes the same batch again; only one result reaches the chief).
  core::Expected<BatchStats> evaluate_distributed();

  /// Where this process's replica computes and in which policy (placed by fit() and
  /// evaluate(); the CPU in float32 before), and its loss scale under mixed_float16 (null
  /// otherwise).
  core::Device device() const;
  core::Precision precision() const;
  const core::LossScale* loss_scale() const;

  /// Why the model could not be made from its file (ok when it was): an error naming the
  /// file and what Troupe does not support.
  core::Status status() const;
  /// Its graph: inputs, outputs and their specs, weights. An invariant break for a model
  /// that could not be made (status()).
  const core::graph::Graph& graph() const;
  /// What its data must hold: its inputs, then its outputs' label columns.
  std::vector<core::FeatureSpec> data_specs() const;
  /// Keras's History values of `stats` under the compiled names, with `prefix` ("val_").
  std::map<std::string, double> logs(const BatchStats& stats, const std::string& prefix = "") const;
  /// The batches evaluate() (and fit()'s direct validation, and a side-car evaluator)
  /// score, in place of ModelSpec::eval_batches.
  void set_eval_batches(std::shared_ptr<const std::vector<core::Batch>> batches);
  /// Its outputs on `batch` (inputs only; inference), on the host, in output order: with
  /// the current weights (attached to a ParameterServerStrategy: pulled first, each table's
  /// rows read from the PS tasks).
  core::Expected<std::vector<core::Tensor>> predict(const core::Batch& batch);

  struct State;
  State& state() { return *s_; }

 private:
  std::unique_ptr<State> s_;
};

}  // namespace troupe
