#pragma once

// The parts of a Model that fit(), the callbacks and the evaluator share (not public).

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "api/graph_replica.hpp"
#include "core/loss_scale.hpp"
#include "core/optimizer.hpp"
#include "troupe/coordinator.hpp"
#include "troupe/model.hpp"
#include "troupe/strategy.hpp"

namespace troupe {
namespace detail {

/// A model's graph with its parameters: the chief's copy, or a worker's.
struct Replica {
  /// The graph, its weights as params (tables included: a table's gradient is its rows' in
  /// graph->tables(), and it is held only where this process computes on it), its compiled
  /// objective; null when the model could not be made.
  std::unique_ptr<GraphReplica> graph;
  /// Why the model could not be made (a Keras file Troupe cannot train); ok otherwise.
  core::Status status;
  std::vector<core::Parameter> params;
  std::vector<std::string> names;
  bool table_wanted = false;  // hold_table() may allocate the tables (not on workers)
  // Where the graph computes, once placed.
  core::Device device;
  core::Precision precision = core::Precision::float32;
  bool placed = false;

  /// Reads the spec's graph with its initial values (the file's weights, or the layers'
  /// initializers; a table's only when first held, and never without `with_table`: workers).
  explicit Replica(const ModelSpec& spec, bool with_table = true);
  /// The tables, allocated and initialized on first call as their initializers say (the
  /// values the PS tasks start from); false where they may not be held (a worker's replica).
  bool hold_table();
  /// Moves the graph to the spec's device (troupe::select_device: a worker's GPU by its
  /// local rank) and precision, once (GraphReplica::place); an error names the device and
  /// what was seen (or, when the model could not be made, why: `status`).
  core::Status place(const ModelSpec& spec);
  /// Under mixed_float16: the dynamic loss scale of this replica's steps.
  core::LossScale* loss_scale() const;
};

/// Forward (and backward) of one batch, the rows of its tables from the replica's own:
/// its loss and compiled metrics. A loss that is not finite is an invalid_argument error.
/// With `gradient_done`, the backward pass calls gradient_done(i) as soon as params[i]'s
/// gradient is final, for every gradient it computes, in the graph's gradient_order().
core::Expected<BatchStats> run_batch(Replica& replica, const core::Batch& batch, bool backward,
                                     const std::function<void(size_t)>& gradient_done = {});

/// A Keras model's validation batches, loaded once.
struct EvalData {
  std::mutex mu;
  std::shared_ptr<const std::vector<core::Batch>> batches;
  core::Expected<std::shared_ptr<const std::vector<core::Batch>>> get_batches(
      const ModelSpec& spec);
};

}  // namespace detail

struct Model::State {
  ModelSpec spec;
  detail::Replica replica;
  detail::EvalData eval;
  // One process: the optimizer and its slots, one set per parameter.
  std::unique_ptr<core::Optimizer> optimizer;
  core::Error optimizer_error;
  std::vector<core::SlotSet> slots;  // where their variables are (replica.device)
  // Attached to a ParameterServerStrategy.
  ParameterServerStrategy* strategy = nullptr;
  std::vector<Variable> variables;
  std::unique_ptr<ClusterCoordinator> coordinator;

  explicit State(ModelSpec s);
  /// The fixed tables held locally with their optimizer slots (a one-process fit, a model
  /// set from a checkpoint).
  void hold_table();
  /// The replica on the spec's device, its slots with it (once; fit() and evaluate() ask).
  core::Status place();
};

namespace detail {
/// The rows a Keras model's batch reads, from where its tables are: held in this process,
/// or (attached to a ParameterServerStrategy) read from the PS tasks by index or key.
GraphReplica::RowsFn model_rows(Model::State& s);
}  // namespace detail

}  // namespace troupe
