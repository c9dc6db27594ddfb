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
#include "core/nn/ctr_model.hpp"
#include "core/parameter.hpp"
#include "troupe/coordinator_types.hpp"
#include "troupe/keras.hpp"
#include "troupe/strategy.hpp"

namespace troupe {

namespace core::keras {
class CtrGraph;
}

class ClusterCoordinator;
class ParameterServerStrategy;
class Registry;

/// What a model is, the same in every process of a job: a Keras graph (`keras`: a .keras
/// file, to_json()'s JSON, or a built-in model's JSON such as
/// core::keras::classifier_model_config's) with its data, or a built-in CTR model (`ctr`).
struct ModelSpec {
  /// Names the model's registered steps ("<name>/train", "<name>/evaluate"; a Keras
  /// model's also "<name>/validate"). A Keras model without a name is "keras": it runs
  /// the generic steps of register_keras (troupe train's and Python's jobs).
  std::string name;
  /// A CTR model's optimizer (a Keras model's is its compile_config's).
  std::string optimizer = "sgd";  // core::make_optimizer's names
  float learning_rate = 0.01f;
  /// Initial values, as a PS task makes them: kernels (rank >= 2) glorot-uniform with
  /// seeds seed, seed + 1, ... in parameter order, everything else zeros.
  uint64_t seed = 1;
  /// The evaluation examples (loaded once per process, on first use), taken in batches of
  /// eval_batch_size in order: batch i is examples [i * size, (i + 1) * size).
  std::function<core::Expected<std::vector<core::Example>>()> eval_examples;
  int64_t eval_batch_size = 1000;
  /// Where each process's replica computes and in which policy (troupe/devices.hpp):
  /// "cpu", "cuda" (a worker's GPU by its local rank) or "cuda:N"; "float32", "tf32",
  /// "mixed_bfloat16", "mixed_float16" (dynamic loss scaling, a PS worker its own) or "auto".
  /// Variables on parameter servers stay float32 on their hosts; workers copy pulled
  /// values to their device and gradients back.
  std::string device = "cpu";
  std::string precision = "float32";
  /// A click-through-rate model instead of `build`'s classifier: the model of
  /// core/nn/ctr_model.hpp with this config (trained as its Keras form's layer graph), its
  /// loss sigmoid cross-entropy, its metrics binary accuracy and AUC. Its table is the
  /// variable `ctr_table` ([table_rows, config.row_width()], uniform in [-0.05, 0.05]); with
  /// a ParameterServerStrategy the workers pull and push only the rows of each batch (give
  /// the strategy a partitioner to split the table over the PS tasks). Attached to a
  /// strategy, the chief never holds the table either: evaluate() reads each batch's rows
  /// from the PS tasks and read_weights() (what ModelCheckpoint saves) reads the table only
  /// for the checkpoint. A one-process fit, and a model set from a checkpoint (a side-car
  /// evaluator), hold it. Not for MultiWorkerMirroredStrategy (an error).
  std::optional<core::CtrModelConfig> ctr;
  int64_t table_rows = 0;
  /// A CTR model whose table has no fixed vocabulary (ParameterServerStrategy only): the
  /// examples' ids are raw 64-bit keys (e.g. Criteo text read with CriteoOptions::raw_keys),
  /// and the table is a dynamic table on the PS tasks (create_dynamic_table: admission,
  /// eviction, `max_rows`; its width is the model's row width, table_rows is unused). The
  /// chief never holds it whole to train or evaluate: evaluate() reads each batch's rows by
  /// key, read_weights() (what ModelCheckpoint saves) reads it in pages. Keys without a row
  /// score with zeros, as on the PS tasks. A one-process fit() of it is an error.
  std::optional<DynamicTableSpec> dynamic_table;
  /// A Keras model (troupe/keras.hpp) instead of `ctr`: its layers, initial
  /// weights, loss, metrics and optimizer from the file (`optimizer` and `learning_rate`
  /// above are not used). Every variable lives on the PS tasks under a
  /// ParameterServerStrategy: each Embedding's table sharded by the strategy's partitioner
  /// and read and updated by the rows a batch uses, the other weights whole.
  std::shared_ptr<const KerasSource> keras;
  KerasOptions keras_options;
  /// A Keras model's validation batches (named columns), loaded once on the chief when
  /// evaluate() first runs, and on each worker when it first runs "<name>/validate"
  /// (evaluate_distributed(): the same batches, in the same order, in every process).
  std::function<core::Expected<std::vector<core::Batch>>()> eval_batches;
};

/// A checkpoint's int vector holding a dynamic table's keys, a key per row of the tensor
/// `ctr_table` (see Model::read_weights).
inline constexpr const char* ctr_table_keys = "embedding/keys";

/// The name of a CTR model's table variable.
inline constexpr const char* ctr_table = "embedding";

/// Sums over some batches of a classifier: what a step returns to the chief. Sums merge
/// exactly, whatever the order.
struct BatchStats {
  double loss_sum = 0.0;  // mean batch loss times batch size, summed
  int64_t correct = 0;
  int64_t examples = 0;
  int64_t batches = 0;
  /// CTR models: the AUC's histograms of predicted probabilities (core::AUC's buckets),
  /// positives and negatives; empty for classifiers.
  std::vector<int64_t> auc_pos, auc_neg;
  /// Keras models: the state of each compiled History value (loss_sum / examples is then
  /// the weighted loss); empty for the others.
  core::graph::MetricStates metrics;

  BatchStats() = default;
  BatchStats(double loss_sum_, int64_t correct_, int64_t examples_, int64_t batches_)
      : loss_sum(loss_sum_), correct(correct_), examples(examples_), batches(batches_) {}

  void merge(const BatchStats& o) {
    loss_sum += o.loss_sum;
    correct += o.correct;
    examples += o.examples;
    batches += o.batches;
    add(auc_pos, o.auc_pos);
    add(auc_neg, o.auc_neg);
    if (metrics.values.empty())
      metrics = o.metrics;
    else if (!o.metrics.values.empty())
      (void)metrics.merge(o.metrics);  // one model's states: the same kinds in one order
  }
  /// Counts of `times` batches like this one (a closure's last step standing for all).
  void scale(int64_t times) {
    loss_sum *= static_cast<double>(times);
    correct *= times;
    examples *= times;
    for (auto& c : auc_pos)
      c *= times;
    for (auto& c : auc_neg)
      c *= times;
    for (auto& m : metrics.values) {
      m.total *= static_cast<double>(times);
      m.count *= times;
      for (auto& c : m.positives)
        c *= times;
      for (auto& c : m.negatives)
        c *= times;
    }
  }
  bool has_auc() const { return auc_pos.size() >= 2 && auc_pos.size() == auc_neg.size(); }
  double auc() const { return has_auc() ? core::AUC::from_counts(auc_pos, auc_neg).result() : 0.0; }
  double loss() const { return examples == 0 ? 0.0 : loss_sum / static_cast<double>(examples); }
  double accuracy() const {
    return examples == 0 ? 0.0 : static_cast<double>(correct) / static_cast<double>(examples);
  }
  MSGPACK_DEFINE(loss_sum, correct, examples, batches, auc_pos, auc_neg, metrics);

 private:
  static void add(std::vector<int64_t>& to, const std::vector<int64_t>& from) {
    if (to.size() < from.size()) to.resize(from.size());
    for (size_t i = 0; i < from.size(); ++i)
      to[i] += from[i];
  }
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
  /// The CTR model (ModelSpec::ctr) as the layer graph it trains (core/keras/ctr_graph.hpp),
  /// or null.
  core::keras::CtrGraph* ctr();
  std::vector<core::Parameter>& parameters();

  /// Creates the model's variables on the PS tasks (once; a second strategy is an error).
  core::Status attach(ParameterServerStrategy& strategy);
  ParameterServerStrategy* strategy();
  /// Attached: the model's variables on the PS tasks, in parameters() order (a CTR model's
  /// table, named ctr_table, last); empty otherwise.
  const std::vector<Variable>& variables() const;
  /// The coordinator, made with `options` on the first call; the same one afterwards.
  core::Expected<ClusterCoordinator*> coordinator(const CoordinatorOptions& options = {});
  /// The coordinator if one was made (to shut the cluster down at the end).
  ClusterCoordinator* coordinator_if_made();

  /// Attached: reads the variables from the PS tasks into the local layers (a CTR model's
  /// table stays on the PS tasks: only the dense variables come).
  core::Status pull();
  /// The local layers' values, one tensor per parameter name (a dynamic table: the rows
  /// set_weights() gave, their keys in ints[ctr_table_keys]). Attached, a CTR model's table
  /// is not among them: read_weights() reads it.
  core::Checkpoint weights();
  /// Attached: pull() and the dense values, with a CTR model's table read from the PS tasks
  /// (a fixed one whole, a dynamic one in pages by ParameterServerStrategy::read_table; the
  /// chief holds it only for the checkpoint). Otherwise weights().
  core::Expected<core::Checkpoint> read_weights();
  /// Sets the local layers from a checkpoint's tensors: every parameter must be there
  /// with its shape (a dynamic table: any number of rows of its width, a distinct key a
  /// row), or it is an invalid_argument error naming it and nothing changes.
  core::Status set_weights(const core::Checkpoint& ckpt);

  /// Evaluates the local layers on the evaluation examples (attached: pulls first; a CTR
  /// model's table rows are read from the PS tasks a batch at a time).
  core::Expected<BatchStats> evaluate();
  /// Evaluates through the coordinator: one "<name>/evaluate" closure per batch on the
  /// workers, each batch's result counted exactly once (a closure retried after a lost
  /// worker computes the same batch again; only one result reaches the chief).
  core::Expected<BatchStats> evaluate_distributed();

  /// Where this process's replica computes and in which policy (placed by fit() and
  /// evaluate(); the CPU in float32 before), and its loss scale under mixed_float16 (null
  /// otherwise).
  core::Device device() const;
  core::Precision precision() const;
  const core::LossScale* loss_scale() const;

  /// The evaluation examples (loaded on first use); batch count at eval_batch_size.
  core::Expected<std::shared_ptr<const std::vector<core::Example>>> eval_examples();
  int64_t eval_batches();

  // ---- A Keras model (ModelSpec::keras) ----
  /// Why the model could not be made from its file (ok when it was): an error naming the
  /// file and what Troupe does not support.
  core::Status status() const;
  /// Its graph: inputs, outputs and their specs, weights. An invariant break for a model
  /// that could not be made (status()) or is no Keras model.
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

/// Evaluation batch `index` of `examples`, `size` examples per batch (the last may be
/// shorter); an index past the end is an out_of_range error.
core::Expected<core::Batch> eval_batch(const std::vector<core::Example>& examples, int64_t size,
                                       int64_t index);

}  // namespace troupe
