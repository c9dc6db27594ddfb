#pragma once

// What Keras's model.compile() asked of a model, read from the "compile_config" object a
// .keras file's config.json holds (keys "optimizer", "loss", "loss_weights", "metrics",
// "weighted_metrics", "run_eagerly", "steps_per_execution", "jit_compile", and
// "auto_scale_loss" where a Keras version writes it), resolved against a graph's outputs as
// Keras 3 resolves it (keras/src/trainers/compile_utils.py): a loss per output (one for
// all, a list per output, or a dict by output name), loss weights, metrics per output, and
// the names model.fit's History gives every value. What Troupe does not implement is an
// error naming it: a loss, metric or optimizer class, or an argument other than its default.
//
//   auto cc = graph::parse_compile_config(config_json["compile_config"], *model.graph);
//   cc->history_names();     // {"loss", "click_accuracy", "click_loss", "kind_loss"}
//   cc->optimizer;           // core::OptimizerConfig, Keras 3's formulas
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

#include <nlohmann/json_fwd.hpp>

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

/// Reads a compile_config against `graph`'s outputs. Errors name what is at fault: the key,
/// the output, the loss, metric or optimizer and its argument.
Expected<CompileConfig> parse_compile_config(const nlohmann::json& compile_config,
                                             const Graph& graph,
                                             const CompileOptions& options = {});

/// Reads Keras's "optimizer" (a serialized optimizer or its name): SGD (momentum, nesterov),
/// Adam and AdamW (amsgrad false), Adagrad, RMSprop (centered false), Ftrl; learning_rate a
/// number or an ExponentialDecay; weight_decay for every class; LossScaleOptimizer's inner
/// optimizer (its scale into `loss_scale` when given). clipnorm, clipvalue,
/// global_clipnorm, use_ema, loss_scale_factor and gradient_accumulation_steps only at
/// their defaults.
Expected<OptimizerConfig> parse_keras_optimizer(
    const nlohmann::json& optimizer, std::optional<LossScaleOptions>* loss_scale = nullptr);

}  // namespace troupe::core::graph
