#pragma once

// An optimizer's whole configuration (OptimizerConfig: what it does per element, the same
// formulas on every backend), and the same as text, so that it travels where an optimizer's
// name did (a variable's definition on the PS tasks, their snapshots, a backup's check): a
// JSON object of its fields. A name ("adam") still means Keras's defaults.
//
//   std::string text = optimizer_text(config);          // {"kind":"adam","learning_rate":...}
//   auto opt = make_optimizer_from(text, /*learning_rate=*/0.0f);   // core/optimizer.hpp

#include <cstdint>
#include <string>

#include "core/expected.hpp"

namespace troupe::core {

/// What one optimizer does per element, as data (core/optimizer.hpp makes it; device
/// backends apply it with the same formulas as the CPU's Optimizer::update). A plain value:
/// it travels to parameter servers inside messages.
struct OptimizerConfig {
  enum class Kind : uint8_t { sgd, momentum, adagrad, adam, rmsprop, ftrl };
  Kind kind = Kind::sgd;
  float learning_rate = 0.01f;
  float momentum = 0.0f;  // momentum, rmsprop
  bool nesterov = false;
  float beta_1 = 0.9f, beta_2 = 0.999f, epsilon = 1e-7f;   // adam (epsilon: adagrad, rmsprop)
  float rho = 0.9f;                                        // rmsprop
  float initial_accumulator = 0.1f;                        // adagrad, ftrl
  float l1 = 0.0f, l2 = 0.0f, beta = 0.0f, power = -0.5f;  // ftrl
  float l2_shrinkage = 0.0f;                               // ftrl
  /// Keras 3's decoupled weight decay, for every kind (AdamW is adam with it): before each
  /// update, w -= w * weight_decay * lr, lr being the update's learning rate.
  float weight_decay = 0.0f;
  /// Keras's ExponentialDecay of the learning rate (decay_steps 0: none): update t (1-based)
  /// uses learning_rate * decay_rate^((t - 1) / decay_steps), the exponent floored under
  /// staircase.
  int64_t decay_steps = 0;
  float decay_rate = 1.0f;
  bool staircase = false;

  int num_slots() const;
  /// The learning rate of update t (1-based), after the decay schedule.
  float learning_rate_at(int64_t t) const;
};

/// "sgd", "momentum", "nesterov", "adagrad", "adam", "rmsprop", "ftrl".
const char* optimizer_kind_name(OptimizerConfig::Kind kind);
/// The config as a JSON object's text (every field).
std::string optimizer_text(const OptimizerConfig& config);
/// A config from optimizer_text's form; a field of the wrong type, an unknown kind or key,
/// or a value out of its range is an invalid_argument error naming it.
Expected<OptimizerConfig> parse_optimizer_text(const std::string& text);

}  // namespace troupe::core
