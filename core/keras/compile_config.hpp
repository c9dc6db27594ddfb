#pragma once

// What Keras's model.compile() asked of a model (core/graph/compile.hpp), read from the
// "compile_config" object a .keras file's config.json holds (keys "optimizer", "loss",
// "loss_weights", "metrics", "weighted_metrics", "run_eagerly", "steps_per_execution",
// "jit_compile", and "auto_scale_loss" where a Keras version writes it), resolved against a
// graph's outputs as Keras 3 resolves it (keras/src/trainers/compile_utils.py): a loss per
// output (one for all, a list per output, or a dict by output name), loss weights, metrics
// per output. What Troupe does not implement is an error naming it: a loss, metric or
// optimizer class, or an argument other than its default.
//
//   auto cc = keras::parse_compile_config(config_json["compile_config"], *model.graph);
//   cc->history_names();     // {"loss", "click_accuracy", "click_loss", "kind_loss"}
//   cc->optimizer;           // core::OptimizerConfig, Keras 3's formulas

#include <optional>

#include <nlohmann/json_fwd.hpp>

#include "core/expected.hpp"
#include "core/graph/compile.hpp"
#include "core/graph/graph.hpp"

namespace troupe::core::keras {

using graph::CompileConfig;
using graph::CompileOptions;

/// Reads a compile_config against `graph`'s outputs. Errors name what is at fault: the key,
/// the output, the loss, metric or optimizer and its argument.
Expected<CompileConfig> parse_compile_config(const nlohmann::json& compile_config,
                                             const graph::Graph& graph,
                                             const CompileOptions& options = {});

/// Reads Keras's "optimizer" (a serialized optimizer or its name): SGD (momentum, nesterov),
/// Adam and AdamW (amsgrad false), Adagrad, RMSprop (centered false), Ftrl; learning_rate a
/// number or an ExponentialDecay; weight_decay for every class; LossScaleOptimizer's inner
/// optimizer (its scale into `loss_scale` when given). clipnorm, clipvalue,
/// global_clipnorm, use_ema, loss_scale_factor and gradient_accumulation_steps only at
/// their defaults.
Expected<OptimizerConfig> parse_keras_optimizer(
    const nlohmann::json& optimizer, std::optional<LossScaleOptions>* loss_scale = nullptr);

}  // namespace troupe::core::keras
