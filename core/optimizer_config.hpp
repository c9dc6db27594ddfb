#pragma once

// An optimizer's whole configuration as text, so that it travels where an optimizer's name
// did (a variable's definition on the PS tasks, their snapshots, a backup's check): a JSON
// object of core::OptimizerConfig's fields. A name ("adam") still means Keras's defaults.
//
//   std::string text = optimizer_text(config);          // {"kind":"adam","learning_rate":...}
//   auto opt = make_optimizer_from(text, /*learning_rate=*/0.0f);   // the same optimizer

#include <memory>
#include <string>

#include "core/backend.hpp"
#include "core/expected.hpp"
#include "core/optimizer.hpp"

namespace troupe::core {

/// "sgd", "momentum", "nesterov", "adagrad", "adam", "rmsprop", "ftrl".
const char* optimizer_kind_name(OptimizerConfig::Kind kind);
/// The config as a JSON object's text (every field).
std::string optimizer_text(const OptimizerConfig& config);
/// A config from optimizer_text's form; a field of the wrong type, an unknown kind or key,
/// or a value out of its range is an invalid_argument error naming it.
Expected<OptimizerConfig> parse_optimizer_text(const std::string& text);
/// The optimizer `text` describes: optimizer_text's JSON, or a name with `learning_rate`
/// (core::make_optimizer's).
Expected<std::unique_ptr<Optimizer>> make_optimizer_from(const std::string& text,
                                                         float learning_rate);

}  // namespace troupe::core
