#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <msgpack.hpp>

#include "core/checkpoint/checkpoint.hpp"
#include "core/data/example.hpp"
#include "core/expected.hpp"
#include "core/nn/sequential.hpp"
#include "troupe/coordinator_types.hpp"

namespace troupe {

class ClusterCoordinator;
class ParameterServerStrategy;
class Registry;

/// What a classifier model is, the same in every process of a job: how to build its
/// layers, its optimizer, how its variables start, and its evaluation data.
struct ModelSpec {
  /// Names the model's registered steps ("<name>/train", "<name>/evaluate").
  std::string name;
  /// The layers (softmax cross-entropy on the logits of the last one is the loss).
  std::function<std::unique_ptr<core::Sequential>()> build;
  std::string optimizer = "sgd";  // core::make_optimizer's names
  float learning_rate = 0.01f;
  /// Initial values, as a PS task makes them: kernels (rank >= 2) glorot-uniform with
  /// seeds seed, seed + 1, ... in parameter order, everything else zeros.
  uint64_t seed = 1;
  /// The evaluation examples (loaded once per process, on first use), taken in batches of
  /// eval_batch_size in order: batch i is examples [i * size, (i + 1) * size).
  std::function<core::Expected<std::vector<core::Example>>()> eval_examples;
  int64_t eval_batch_size = 1000;
};

/// Sums over some batches of a classifier: what a step returns to the chief. Sums merge
/// exactly, whatever the order.
struct BatchStats {
  double loss_sum = 0.0;  // mean batch loss times batch size, summed
  int64_t correct = 0;
  int64_t examples = 0;
  int64_t batches = 0;

  void merge(const BatchStats& o) {
    loss_sum += o.loss_sum;
    correct += o.correct;
    examples += o.examples;
    batches += o.batches;
  }
  double loss() const { return examples == 0 ? 0.0 : loss_sum / static_cast<double>(examples); }
  double accuracy() const {
    return examples == 0 ? 0.0 : static_cast<double>(correct) / static_cast<double>(examples);
  }
  MSGPACK_DEFINE(loss_sum, correct, examples, batches);
};

/// Registers the model's steps in every process's registry (before serve()):
///   "<name>/train"(PerWorkerDataset) pulls the variables, trains on the worker's next
///     batch and pushes the gradients; returns the batch's BatchStats;
///   "<name>/evaluate"(int64 batch) pulls the variables and evaluates evaluation batch
///     `batch`; returns its BatchStats.
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
  core::Sequential& layers();
  std::vector<core::Parameter>& parameters();

  /// Creates the model's variables on the PS tasks (once; a second strategy is an error).
  core::Status attach(ParameterServerStrategy& strategy);
  ParameterServerStrategy* strategy();
  /// The coordinator, made with `options` on the first call; the same one afterwards.
  core::Expected<ClusterCoordinator*> coordinator(const CoordinatorOptions& options = {});
  /// The coordinator if one was made (to shut the cluster down at the end).
  ClusterCoordinator* coordinator_if_made();

  /// Attached: reads the variables from the PS tasks into the local layers.
  core::Status pull();
  /// The local layers' values, one tensor per parameter name.
  core::Checkpoint weights();
  /// Sets the local layers from a checkpoint's tensors: every parameter must be there
  /// with its shape, or it is an invalid_argument error naming it and nothing changes.
  core::Status set_weights(const core::Checkpoint& ckpt);

  /// Evaluates the local layers on the evaluation examples (attached: pulls first).
  core::Expected<BatchStats> evaluate();
  /// Evaluates through the coordinator: one "<name>/evaluate" closure per batch on the
  /// workers, each batch's result counted exactly once (a closure retried after a lost
  /// worker computes the same batch again; only one result reaches the chief).
  core::Expected<BatchStats> evaluate_distributed();

  /// The evaluation examples (loaded on first use); batch count at eval_batch_size.
  core::Expected<std::shared_ptr<const std::vector<core::Example>>> eval_examples();
  int64_t eval_batches();

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
