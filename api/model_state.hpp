#pragma once

// The parts of a Model that fit(), the callbacks and the evaluator share (not public).

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "api/graph_replica.hpp"
#include "core/keras/ctr_graph.hpp"
#include "core/loss_scale.hpp"
#include "core/nn/losses.hpp"
#include "core/optimizer.hpp"
#include "troupe/coordinator.hpp"
#include "troupe/model.hpp"
#include "troupe/strategy.hpp"

namespace troupe {
namespace detail {

/// A model's layers with their parameters and loss: the chief's copy, or a worker's.
/// A CTR model's parameters are its dense ones followed by its table (`table_index`). A
/// fixed table is allocated only when a replica computes on it itself (hold_table(): a
/// one-process fit, a model loaded from a checkpoint); a worker's replica, and a chief's
/// attached to a ParameterServerStrategy, leave it empty and read the rows each batch
/// needs from the PS tasks.
struct Replica {
  std::unique_ptr<core::keras::CtrGraph> ctr;  // CTR models, as their Keras form's graph
  /// Keras models: the graph, its weights as params (tables included: a table's gradient
  /// is its rows' in graph->tables(), and it is held only where this process computes on
  /// it), its compiled objective.
  std::unique_ptr<GraphReplica> graph;
  /// Why the model could not be made (a Keras file Troupe cannot train); ok otherwise.
  core::Status status;
  std::vector<core::Parameter> params;
  std::vector<std::string> names;
  // CTR models only.
  core::SigmoidBinaryCrossEntropy ctr_loss;
  core::Tensor table, table_grad;  // table_grad stays empty: the gradient is row_grads()
  core::Shape table_shape;
  core::Initializer table_init;  // a fixed table's initial values, when it is first held
  bool table_wanted = false;     // hold_table() may allocate it (not on workers)
  bool table_held = false;
  int table_index = -1;  // in params; -1: none
  // A dynamic table (ModelSpec::dynamic_table): the rows of `table` are keyed, row i by
  // table_keys[i] (row_of maps back); empty until set_weights() gives rows.
  bool dynamic = false;
  std::vector<int64_t> table_keys;
  std::unordered_map<int64_t, int64_t> row_of;
  core::Tensor rows;
  // Where the layers compute (the table, on the chief, stays on the host), and the copies
  // that cross: the batch and pulled rows going there, gradients coming back to be pushed.
  core::Device device;
  core::Precision precision = core::Precision::float32;
  std::vector<core::Tensor> host_grads;
  bool placed = false;
  /// Under mixed_float16: the dynamic loss scale of this replica's steps.
  std::optional<core::LossScale> loss_scale;

  /// Builds the layers and gives them the spec's initial values (a fixed table's only when
  /// first held, and never without `with_table`: workers).
  explicit Replica(const ModelSpec& spec, bool with_table = true);
  /// A fixed table, allocated and initialized on first call as ModelSpec::seed says (the
  /// values the PS tasks start from); false where it may not be held (a worker's replica).
  bool hold_table();
  /// Moves the layers to the spec's device (troupe::select_device: a worker's GPU by its
  /// local rank) and precision, once; an error names the device and what was seen (or,
  /// when the model could not be made, why: `status`).
  core::Status place(const ModelSpec& spec);
  /// Sets every parameter (in order); a shape that differs is an error naming it.
  core::Status assign(std::vector<core::Tensor> values);
  /// The names of the parameters that are not the table (what workers pull and push whole).
  std::vector<std::string> dense_names() const;
  /// Sets the dense parameters (in dense_names() order).
  core::Status assign_dense(std::vector<core::Tensor> values);
  /// The dense parameters' gradients on the host, named, ready to push.
  std::vector<std::pair<std::string, core::ConstTensorView>> dense_grads();
  /// The CTR model's row gradients on the host, ready to push.
  core::ConstTensorView row_grads();
  /// The unique ids of the CTR model's last batch (feed_ctr), ascending.
  const std::vector<int64_t>& ids() const { return ctr->ids(); }
  /// Under loss scaling: whether the last batch's gradients are finite (then unscaled:
  /// apply or push them) or the step is skipped; true without loss scaling.
  bool finish_scaled_step();
};

/// Forward (and backward) of one batch: its loss and accuracy counts (and, for CTR models,
/// the AUC histograms; for Keras models, their compiled metrics). A loss that is not finite
/// is an invalid_argument error. CTR and Keras models gather the batch's rows from the
/// replica's tables. With `gradient_done` (Keras models), the backward
/// pass calls gradient_done(i) as soon as params[i]'s gradient is final, for every
/// gradient it computes, in gradient_order(replica).
core::Expected<BatchStats> run_batch(Replica& replica, const core::Batch& batch, bool backward,
                                     const std::function<void(size_t)>& gradient_done = {});
/// The order run_batch reports gradients final in (the same every step): a Keras model's
/// Graph::gradient_order() (none for a CTR model).
std::vector<size_t> gradient_order(Replica& replica);
/// Feeds a batch to the CTR model (an error names what does not fit): replica.ids() are
/// then its unique ids, ascending.
core::Status feed_ctr(Replica& replica, const core::Batch& batch);
/// A CTR model's batch, fed by feed_ctr, on rows from elsewhere: `rows` holds the rows of
/// replica.ids(), in that order.
core::Expected<BatchStats> run_ctr_batch(Replica& replica, const core::Batch& batch,
                                         core::ConstTensorView rows, bool backward);

/// The initial values of each parameter, as ModelSpec::seed describes.
std::vector<core::Initializer> initializers(const ModelSpec& spec,
                                            const std::vector<core::Parameter>& params);

/// The evaluation examples, loaded once.
struct EvalData {
  std::mutex mu;
  std::shared_ptr<const std::vector<core::Example>> examples;
  std::shared_ptr<const std::vector<core::Batch>> batches;  // a Keras model's
  core::Expected<std::shared_ptr<const std::vector<core::Example>>> get(const ModelSpec& spec);
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
  bool table_slots_held = false;     // a fixed table's slots: made by hold_table()
  // Attached to a ParameterServerStrategy.
  ParameterServerStrategy* strategy = nullptr;
  std::vector<Variable> variables;
  std::unique_ptr<ClusterCoordinator> coordinator;

  explicit State(ModelSpec s);
  /// A fixed table held locally with its optimizer slots (a one-process fit, a model set
  /// from a checkpoint); nothing for other models.
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
