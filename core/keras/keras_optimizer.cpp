// Keras 3's serialized optimizers (compile_config's "optimizer") as core::OptimizerConfig.
// Defaults are Keras 3's (keras/src/optimizers/*.py); an argument Troupe does not
// implement is accepted only at its default.
#include <algorithm>
#include <cctype>
#include <utility>

#include "core/graph/json_guard.hpp"
#include "core/keras/compile_config.hpp"
#include "core/keras/keras_objects.hpp"

namespace troupe::core::keras {

using namespace graph;

using detail::is_serialized_object;
using detail::KerasArgs;
using detail::lower;
using nlohmann::json;
using Kind = OptimizerConfig::Kind;

namespace {

Error optimizer_error(const std::string& what) {
  return make_error(Errc::invalid_argument, "compile_config: optimizer " + what);
}

// Each class's defaults, as its constructor has them.
struct KerasOptimizer {
  const char* class_name;
  Kind kind;
  float learning_rate;
  float weight_decay;
};

constexpr KerasOptimizer kOptimizers[] = {
    {"SGD", Kind::sgd, 0.01f, 0.0f},          {"Adam", Kind::adam, 0.001f, 0.0f},
    {"AdamW", Kind::adam, 0.001f, 0.004f},    {"Adagrad", Kind::adagrad, 0.001f, 0.0f},
    {"RMSprop", Kind::rmsprop, 0.001f, 0.0f}, {"Ftrl", Kind::ftrl, 0.001f, 0.0f},
};

const KerasOptimizer* find_optimizer(const std::string& name, bool by_lower_name) {
  for (const auto& o : kOptimizers)
    if (name == o.class_name || (by_lower_name && name == lower(o.class_name))) return &o;
  return nullptr;
}

// Reads a float argument into `into` (its default when absent).
Status read(KerasArgs& a, const std::string& key, float& into) {
  auto v = a.number(key, static_cast<double>(into));
  if (!v) return v.error();
  into = static_cast<float>(*v);
  return {};
}

// "learning_rate": a number, or an ExponentialDecay schedule.
Status read_learning_rate(KerasArgs& a, OptimizerConfig& c) {
  const json* lr = a.get("learning_rate");
  if (lr == nullptr) return {};
  if (lr->is_number()) {
    c.learning_rate = to_float(lr->get<double>());
    return {};
  }
  if (!is_serialized_object(*lr) || (*lr)["class_name"] != "ExponentialDecay")
    return a.error("learning_rate",
                   "is not supported by Troupe (a number or an ExponentialDecay schedule)");
  KerasArgs s("learning rate schedule 'ExponentialDecay'", (*lr)["config"]);
  s.ignore("name");
  auto initial = s.number("initial_learning_rate", 0.0);
  auto steps = s.integer("decay_steps", 0);
  auto rate = s.number("decay_rate", 1.0);
  auto staircase = s.boolean("staircase", false);
  if (!initial) return initial.error();
  if (!steps) return steps.error();
  if (!rate) return rate.error();
  if (!staircase) return staircase.error();
  if (*steps <= 0) return s.error("decay_steps", "must be positive");
  if (auto st = s.finish(); !st) return st;
  c.learning_rate = static_cast<float>(*initial);
  c.decay_steps = *steps;
  c.decay_rate = static_cast<float>(*rate);
  c.staircase = *staircase;
  return {};
}

Expected<OptimizerConfig> parse_object(const std::string& cls, const json& config) {
  const KerasOptimizer* o = find_optimizer(cls, false);
  if (o == nullptr)
    return optimizer_error("'" + cls +
                           "' is not supported (Troupe has SGD, Adam, AdamW, Adagrad, RMSprop, "
                           "Ftrl and LossScaleOptimizer)");
  OptimizerConfig c;
  c.kind = o->kind;
  c.learning_rate = o->learning_rate;
  c.weight_decay = o->weight_decay;
  KerasArgs a("optimizer '" + cls + "'", config);
  a.ignore("name");
  if (auto st = read_learning_rate(a, c); !st) return st.error();
  if (auto st = read(a, "weight_decay", c.weight_decay); !st) return st.error();
  for (const char* key : {"clipnorm", "clipvalue", "global_clipnorm", "loss_scale_factor",
                          "gradient_accumulation_steps"})
    if (auto st = a.allow_null(key); !st) return st.error();
  if (auto st = a.allow("use_ema", {false}); !st) return st.error();
  // Only read with use_ema.
  a.ignore("ema_momentum");
  a.ignore("ema_overwrite_frequency");
  switch (o->kind) {
    case Kind::sgd: {
      c.momentum = 0.0f;
      if (auto st = read(a, "momentum", c.momentum); !st) return st.error();
      auto nesterov = a.boolean("nesterov", false);
      if (!nesterov) return nesterov.error();
      // Keras keeps no momentum slot at momentum 0, Nesterov or not: plain SGD.
      if (c.momentum != 0.0f) {
        c.kind = Kind::momentum;
        c.nesterov = *nesterov;
      }
      break;
    }
    case Kind::adam:
      for (const auto& [key, into] : std::vector<std::pair<const char*, float*>>{
               {"beta_1", &c.beta_1}, {"beta_2", &c.beta_2}, {"epsilon", &c.epsilon}})
        if (auto st = read(a, key, *into); !st) return st.error();
      if (auto st = a.allow("amsgrad", {false}); !st) return st.error();
      break;
    case Kind::adagrad:
      c.initial_accumulator = 0.1f;
      if (auto st = read(a, "initial_accumulator_value", c.initial_accumulator); !st)
        return st.error();
      if (auto st = read(a, "epsilon", c.epsilon); !st) return st.error();
      break;
    case Kind::rmsprop:
      c.momentum = 0.0f;
      for (const auto& [key, into] : std::vector<std::pair<const char*, float*>>{
               {"rho", &c.rho}, {"momentum", &c.momentum}, {"epsilon", &c.epsilon}})
        if (auto st = read(a, key, *into); !st) return st.error();
      if (auto st = a.allow("centered", {false}); !st) return st.error();
      break;
    case Kind::ftrl:
      for (const auto& [key, into] : std::vector<std::pair<const char*, float*>>{
               {"learning_rate_power", &c.power},
               {"initial_accumulator_value", &c.initial_accumulator},
               {"l1_regularization_strength", &c.l1},
               {"l2_regularization_strength", &c.l2},
               {"l2_shrinkage_regularization_strength", &c.l2_shrinkage},
               {"beta", &c.beta}})
        if (auto st = read(a, key, *into); !st) return st.error();
      if (c.power > 0.0f) return a.error("learning_rate_power", "must be negative or zero");
      break;
    case Kind::momentum:
      break;
  }
  if (auto st = a.finish(); !st) return st.error();
  return c;
}

}  // namespace

namespace {

Expected<OptimizerConfig> parse_optimizer_unguarded(const json& optimizer,
                                                    std::optional<LossScaleOptions>* loss_scale) {
  if (optimizer.is_string()) {  // optimizers.get("adam"): the class with its defaults
    const std::string name = optimizer.get<std::string>();
    const KerasOptimizer* o = find_optimizer(name, true);
    if (o == nullptr) return parse_object(name, json::object());
    return parse_object(o->class_name, json::object());
  }
  if (!is_serialized_object(optimizer))
    return optimizer_error("= " + optimizer.dump().substr(0, 80) +
                           " is neither an optimizer's name nor a serialized optimizer");
  const std::string cls =
      optimizer["class_name"].is_string() ? optimizer["class_name"].get<std::string>() : "";
  if (cls != "LossScaleOptimizer") return parse_object(cls, optimizer["config"]);
  // Keras's dynamic loss scaling around an inner optimizer.
  KerasArgs a("optimizer 'LossScaleOptimizer'", optimizer["config"]);
  a.ignore("name");
  const json* inner = a.get("inner_optimizer");
  if (inner == nullptr) return a.error("inner_optimizer", "is required");
  LossScaleOptions ls;
  if (auto st = read(a, "initial_scale", ls.initial); !st) return st.error();
  auto growth = a.integer("dynamic_growth_steps", ls.growth_interval);
  if (!growth) return growth.error();
  ls.growth_interval = *growth;
  if (auto st = a.finish(); !st) return st.error();
  if (loss_scale != nullptr) *loss_scale = ls;
  return parse_keras_optimizer(*inner, nullptr);
}

}  // namespace

Expected<OptimizerConfig> parse_keras_optimizer(const json& optimizer,
                                                std::optional<LossScaleOptions>* loss_scale) {
  return guard_json("optimizer", [&] { return parse_optimizer_unguarded(optimizer, loss_scale); });
}

}  // namespace troupe::core::keras
