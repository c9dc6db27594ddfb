#pragma once

// The "config" of a serialized Keras object (a layer's, a loss's, a metric's, an
// optimizer's) read argument by argument: each asked for by name with its default, or
// accepted only at the values Troupe implements, so that whatever is not read is known.
// finish() then makes every argument left unread an error naming the object and the
// argument: a model never trains with an option silently ignored. LayerConfig
// (layer_config.hpp) adds what only layers have.
//
//   ConfigArgs a("compile_config: loss 'BinaryCrossentropy' of output 'click'", config);
//   auto from_logits = a.boolean("from_logits", false);
//   if (auto st = a.allow("label_smoothing", {0}); !st) return st.error();
//   if (auto st = a.finish(); !st) return st.error();

#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/expected.hpp"

namespace troupe::core::graph {

/// A number of a config as float32, as NumPy converts it: beyond float32's range an
/// infinity (a plain cast would be undefined behaviour there), NaN as NaN.
float to_float(double v);

class ConfigArgs {
 public:
  /// `context` names the object in errors: "layer 'dense' (Dense)", "compile_config: loss
  /// 'BinaryCrossentropy' of output 'click'". A config that is no object reads as empty.
  ConfigArgs(std::string context, const nlohmann::json& config);

  /// The value of `key`, or null when it is absent or null; marks it read.
  const nlohmann::json* get(const std::string& key);
  /// The raw value (null if absent), marked read.
  const nlohmann::json& raw(const std::string& key);
  /// Marks `key` read without a check (a name, or an argument that matters only with
  /// another one that is checked).
  void ignore(const std::string& key) { read_.insert(key); }
  bool has(const std::string& key) const;

  // Each marks its argument read. An argument of the wrong type is an error naming it.
  Expected<int64_t> integer(const std::string& key);  // required
  Expected<int64_t> integer(const std::string& key, int64_t fallback);
  /// A number within float32's range (beyond it: an error naming it).
  Expected<double> number(const std::string& key, double fallback);
  Expected<bool> boolean(const std::string& key, bool fallback);
  Expected<std::string> string(const std::string& key, const std::string& fallback);
  /// An int or a list of ints ("kernel_size": 3 or [3, 3]), `count` long when a single int
  /// stands for all (0: any length).
  Expected<std::vector<int64_t>> integers(const std::string& key, size_t count,
                                          std::vector<int64_t> fallback = {});
  /// A list of ints or null (null: nullopt).
  Expected<std::optional<std::vector<int64_t>>> optional_integers(const std::string& key);

  /// Reads `key` and accepts it only absent, null, or equal to one of `allowed` (numbers
  /// compare by value: 0 and 0.0 are one): arguments whose other values Troupe does not
  /// implement.
  Status allow(const std::string& key, const std::vector<nlohmann::json>& allowed);
  /// allow(key, {}): regularizers, constraints, masks.
  Status allow_null(const std::string& key) { return allow(key, {}); }

  /// Every argument not read is an error naming it.
  Status finish() const;

  /// "<context>: argument 'key' = <value>: <what>" as an invalid_argument error.
  Error error(const std::string& key, const std::string& what) const;

 protected:
  const nlohmann::json& config() const { return config_; }
  void set_context(std::string context) { context_ = std::move(context); }

 private:
  std::string context_;
  nlohmann::json config_;
  std::set<std::string> read_;
};

}  // namespace troupe::core::graph
