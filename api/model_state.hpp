#pragma once

// The parts of a Model that fit(), the callbacks and the evaluator share (not public).

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/nn/losses.hpp"
#include "core/optimizer.hpp"
#include "troupe/coordinator.hpp"
#include "troupe/model.hpp"
#include "troupe/strategy.hpp"

namespace troupe {
namespace detail {

/// A model's layers with their parameters and loss: the chief's copy, or a worker's.
struct Replica {
  std::unique_ptr<core::Sequential> layers;
  std::vector<core::Parameter> params;
  std::vector<std::string> names;
  core::SoftmaxCrossEntropy loss;

  /// Builds the layers and gives them the spec's initial values.
  explicit Replica(const ModelSpec& spec);
  /// Sets every parameter (in order); a shape that differs is an error naming it.
  core::Status assign(std::vector<core::Tensor> values);
};

/// Forward (and backward) of one batch: its loss and accuracy counts. A loss that is not
/// finite is an invalid_argument error.
core::Expected<BatchStats> run_batch(Replica& replica, const core::Batch& batch, bool backward);

/// The initial values of each parameter, as ModelSpec::seed describes.
std::vector<core::Initializer> initializers(const ModelSpec& spec,
                                            const std::vector<core::Parameter>& params);

/// The evaluation examples, loaded once.
struct EvalData {
  std::mutex mu;
  std::shared_ptr<const std::vector<core::Example>> examples;
  core::Expected<std::shared_ptr<const std::vector<core::Example>>> get(const ModelSpec& spec);
};

}  // namespace detail

struct Model::State {
  ModelSpec spec;
  detail::Replica replica;
  detail::EvalData eval;
  // One process: the optimizer and its slots, one set per parameter.
  std::unique_ptr<core::Optimizer> optimizer;
  core::Error optimizer_error;
  std::vector<core::SlotSet> slots;
  // Attached to a ParameterServerStrategy.
  ParameterServerStrategy* strategy = nullptr;
  std::vector<Variable> variables;
  std::unique_ptr<ClusterCoordinator> coordinator;

  explicit State(ModelSpec s);
};

}  // namespace troupe
