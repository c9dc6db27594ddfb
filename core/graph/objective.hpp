#pragma once

// A compiled model's objective run on a graph after its forward pass: each output's loss
// computed on the graph's device (Backend::loss) against its labels from the batch, the
// weighted sum, the backward pass with d(sum)/d(outputs) times the caller's loss scale, and
// the metric states of every History value (core/graph/metric_state.hpp) updated.
//
//   auto cc = keras::parse_compile_config(json["compile_config"], g).value();
//   graph::Objective objective(cc, g);
//   g.feed(batch);  g.forward(/*training=*/true, seed);
//   auto loss = objective.train_step(g, batch);        // g.gradient(w) now holds d(loss)/dw
//   objective.results();                                // {{"loss", 0.69}, {"accuracy", 0.5}}
//
// Labels: output i's come from the batch's column named after the output when the model
// has several outputs, else from "label" (set_label_column changes that). Float labels of
// the predictions' element count (an integer column is converted); for sparse categorical
// cross-entropy and accuracy, one class index per row of predictions (floats must be whole
// numbers; the loss checks they are below the class count). Metrics read the predictions
// on the host: a device's outputs are copied back once per step.

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/data/example.hpp"
#include "core/expected.hpp"
#include "core/graph/compile.hpp"
#include "core/graph/graph.hpp"
#include "core/graph/metric_state.hpp"

namespace troupe::core::graph {

class Objective {
 public:
  /// `config` must have been read for `graph` (one OutputCompile per output).
  Objective(CompileConfig config, const Graph& graph);

  const CompileConfig& config() const { return config_; }
  /// The History names, in the states' order.
  const std::vector<std::string>& names() const { return names_; }
  const std::string& label_column(size_t output) const { return labels_[output].column; }
  /// Takes `output`'s labels from batch column `column`; an unknown output is an error.
  Status set_label_column(const std::string& output, std::string column);

  /// After g.forward(true): the losses, the metrics, then g.backward with the gradients of
  /// the weighted sum times `loss_scale` (and `weight_done`, Graph::backward's). Returns the
  /// batch's loss (the weighted sum, as History's "loss"). A label column missing or of the
  /// wrong shape, or a class index outside the classes, is an error and nothing is
  /// accumulated.
  Expected<double> train_step(Graph& g, const Batch& batch, float loss_scale = 1.0f,
                              const std::function<void(size_t)>& weight_done = {});
  /// After g.forward(false): the losses and metrics, no backward pass.
  Expected<double> test_step(Graph& g, const Batch& batch);

  /// The states so far; merge other workers' into them, or send them to a chief.
  const MetricStates& states() const { return states_; }
  MetricStates& states() { return states_; }
  void reset_states() { states_.reset(); }
  /// Each History name with its value from the states so far.
  std::vector<std::pair<std::string, double>> results() const;

 private:
  // One output's labels and buffers, kept between steps (no allocation per step).
  struct Labels {
    std::string column;
    std::vector<float> floats;     // the column as floats (when it holds ints)
    const float* host = nullptr;   // the labels as floats on the host
    std::vector<int32_t> classes;  // sparse losses: class indices
    Tensor device_labels;          // staging of the labels on the graph's device
    Tensor grad;                   // d(loss)/d(output) on the graph's device
    Tensor host_pred;              // a device's predictions, copied back for the metrics
  };

  Expected<double> step(Graph& g, const Batch& batch, float loss_scale, bool backward,
                        const std::function<void(size_t)>& weight_done = {});
  // Output i's labels from the batch into labels_[i] (floats; class indices if sparse).
  Status read_labels(size_t i, const Graph& g, const Batch& batch, bool sparse);

  CompileConfig config_;
  std::vector<std::string> names_;
  std::vector<Labels> labels_;
  std::vector<bool> sparse_metric_;  // per output: a metric reads class indices
  std::vector<bool> float_metric_;   // per output: a metric reads labels of the predictions' size
  MetricStates states_;
  std::vector<ConstTensorView> doutputs_;
};

}  // namespace troupe::core::graph
