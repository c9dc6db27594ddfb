#include "core/optimizer_config.hpp"
#include "core/optimizer.hpp"

#include <cmath>

#include <nlohmann/json.hpp>

namespace troupe::core {

using nlohmann::json;
using Kind = OptimizerConfig::Kind;

namespace {

constexpr std::pair<const char*, Kind> kKinds[] = {
    {"sgd", Kind::sgd},   {"momentum", Kind::momentum}, {"adagrad", Kind::adagrad},
    {"adam", Kind::adam}, {"rmsprop", Kind::rmsprop},   {"ftrl", Kind::ftrl},
};

}  // namespace

const char* optimizer_kind_name(Kind kind) {
  for (const auto& [name, k] : kKinds)
    if (k == kind) return name;
  return "?";
}

std::string optimizer_text(const OptimizerConfig& c) {
  json j{{"kind", optimizer_kind_name(c.kind)},
         {"learning_rate", c.learning_rate},
         {"momentum", c.momentum},
         {"nesterov", c.nesterov},
         {"beta_1", c.beta_1},
         {"beta_2", c.beta_2},
         {"epsilon", c.epsilon},
         {"rho", c.rho},
         {"initial_accumulator", c.initial_accumulator},
         {"l1", c.l1},
         {"l2", c.l2},
         {"beta", c.beta},
         {"power", c.power},
         {"l2_shrinkage", c.l2_shrinkage},
         {"weight_decay", c.weight_decay},
         {"decay_steps", c.decay_steps},
         {"decay_rate", c.decay_rate},
         {"staircase", c.staircase}};
  return j.dump();
}

Expected<OptimizerConfig> parse_optimizer_text(const std::string& text) {
  const json j = json::parse(text, nullptr, false);
  auto bad = [&](const std::string& what) {
    return make_error(Errc::invalid_argument, "optimizer config: " + what);
  };
  if (!j.is_object()) return bad("not a JSON object");
  OptimizerConfig c;
  bool kind_found = false;
  for (auto it = j.begin(); it != j.end(); ++it) {
    // Named, not bound: C++17 lambdas cannot capture a structured binding.
    const std::string& key = it.key();
    const json& v = it.value();
    auto number = [&](float& to) -> Status {
      if (!v.is_number() || !std::isfinite(v.get<double>()))
        return bad("'" + key + "' must be a number");
      to = v.get<float>();
      return {};
    };
    Status st;
    if (key == "kind") {
      if (!v.is_string()) return bad("'kind' must be a name");
      for (const auto& [name, k] : kKinds)
        if (v.get<std::string>() == name) c.kind = k, kind_found = true;
      if (!kind_found) return bad("unknown kind '" + v.get<std::string>() + "'");
    } else if (key == "learning_rate") {
      st = number(c.learning_rate);
    } else if (key == "momentum") {
      st = number(c.momentum);
    } else if (key == "nesterov" || key == "staircase") {
      if (!v.is_boolean()) return bad("'" + key + "' must be true or false");
      (key == "nesterov" ? c.nesterov : c.staircase) = v.get<bool>();
    } else if (key == "beta_1") {
      st = number(c.beta_1);
    } else if (key == "beta_2") {
      st = number(c.beta_2);
    } else if (key == "epsilon") {
      st = number(c.epsilon);
    } else if (key == "rho") {
      st = number(c.rho);
    } else if (key == "initial_accumulator") {
      st = number(c.initial_accumulator);
    } else if (key == "l1") {
      st = number(c.l1);
    } else if (key == "l2") {
      st = number(c.l2);
    } else if (key == "beta") {
      st = number(c.beta);
    } else if (key == "power") {
      st = number(c.power);
    } else if (key == "l2_shrinkage") {
      st = number(c.l2_shrinkage);
    } else if (key == "weight_decay") {
      st = number(c.weight_decay);
    } else if (key == "decay_rate") {
      st = number(c.decay_rate);
    } else if (key == "decay_steps") {
      if (!v.is_number_integer() || v.get<int64_t>() < 0) return bad("'decay_steps' must be >= 0");
      c.decay_steps = v.get<int64_t>();
    } else {
      return bad("unknown key '" + key + "'");
    }
    if (!st) return st.error();
  }
  if (!kind_found) return bad("no 'kind'");
  if (!(c.learning_rate >= 0.0f)) return bad("'learning_rate' must be >= 0");
  return c;
}

Expected<std::unique_ptr<Optimizer>> make_optimizer_from(const std::string& text,
                                                         float learning_rate) {
  if (text.empty() || text[0] != '{') return make_optimizer(text, learning_rate);
  auto c = parse_optimizer_text(text);
  if (!c) return c.error();
  return make_optimizer(*c);
}

}  // namespace troupe::core
