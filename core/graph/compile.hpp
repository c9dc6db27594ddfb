#pragma once

// What Keras's model.compile() asked of a model, as a graph's step computes it (its
// Objective, core/graph/objective.hpp): a loss per output, loss weights, metrics per output,
// the optimizer, and the names model.fit's History gives every value. Read from a .keras
// file's "compile_config" by core/keras/compile_config.hpp.
//
// History names, as Keras 3 gives them: "loss" (the weighted sum of the outputs' losses);
// each metric by the string it was asked by ("acc", "mse", "AUC") or its object's "name",
// prefixed "<output>_" when the model has several outputs; a repeated name gets "_1",
// "_2", ...; a weighted metric whose name is taken becomes "weighted_<name>"; with more
// than one loss, each output's unweighted loss as "<output>_loss". model.fit's History
// lists them sorted (validation ones with "val_").

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/backend.hpp"
#include "core/expected.hpp"
#include "core/graph/graph.hpp"
#include "core/layer_ops.hpp"
#include "core/loss_scale.hpp"

namespace troupe::core::graph {

/// A loss of one output.
struct LossSpec {
  LossKind kind = LossKind::mean_squared_error;
  std::string name;  // Keras's name of it, for messages ("binary_crossentropy")
};

enum class MetricKind : uint8_t {
  binary_accuracy,
  categorical_accuracy,
  sparse_categorical_accuracy,
  auc,  // ROC, interpolation, as keras.metrics.AUC computes it from its thresholds' counts
  mean_squared_error,
};

/// One compiled metric of one output.
struct MetricSpec {
  MetricKind kind = MetricKind::binary_accuracy;
  std::string name;  // its History name ("click_auc", "weighted_acc")
  size_t output = 0;
  bool weighted = false;         // from weighted_metrics (no sample weights: the same values)
  float threshold = 0.5f;        // binary_accuracy
  int64_t num_thresholds = 200;  // auc
  bool from_logits = false;      // auc: a sigmoid comes first
};

/// What compile() asked of one output of the graph.
struct OutputCompile {
  std::string output;            // the graph's output name
  std::optional<LossSpec> loss;  // none: the output adds nothing to the loss
  float loss_weight = 1.0f;
  /// The History name of the output's unweighted loss ("click_loss"); empty when the model
  /// has one loss.
  std::string loss_name;
};

struct CompileConfig {
  OptimizerConfig optimizer;
  /// A LossScaleOptimizer's dynamic loss scale (Keras's mixed_float16 with auto_scale_loss);
  /// none otherwise.
  std::optional<LossScaleOptions> loss_scale;
  std::vector<OutputCompile> outputs;  // one per graph output, in its order
  std::vector<MetricSpec> metrics;     // in Keras's order: metrics, then weighted_metrics
  int64_t steps_per_execution = 1;

  /// "loss", the metrics, then the outputs' losses: Keras's model.metrics order.
  std::vector<std::string> history_names() const;
};

struct CompileOptions {
  /// Per output name, its labels' shape per example where known (the label column's shape
  /// without the batch axis): Keras picks "accuracy"'s and "crossentropy"'s kind from it.
  /// Where absent, the output's loss says (sparse categorical cross-entropy: one class index
  /// per row of predictions; any other: the predictions' shape).
  std::map<std::string, std::vector<int64_t>> label_shapes;
};

}  // namespace troupe::core::graph
