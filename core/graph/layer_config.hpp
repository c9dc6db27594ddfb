#pragma once

// A Keras layer's config, as a layer's factory reads it: each argument asked for by name,
// with its default, so that whatever a layer does not read is known. finish() then makes
// every argument left unread an error naming the layer, its class and the argument: a
// model never trains with an option silently ignored.
//
//   Expected<std::unique_ptr<Layer>> make_dense(LayerConfig& c) {
//     auto units = c.integer("units");
//     auto act = c.activation("activation", "linear");
//     c.allow_null("kernel_regularizer");            // only its default is supported
//     if (auto st = c.finish(); !st) return st.error();
//     ...
//   }

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/expected.hpp"
#include "core/layer_ops.hpp"
#include "core/partitioner.hpp"

namespace troupe::core::graph {

class LayerConfig {
 public:
  /// `config` is the layer's "config" object; `assets` the .keras file's other entries
  /// (a lookup layer's vocabulary file), or null.
  LayerConfig(std::string class_name, const nlohmann::json& config,
              const std::map<std::string, std::string>* assets = nullptr);
  ~LayerConfig();

  const std::string& class_name() const { return class_name_; }
  const std::string& name() const { return name_; }
  bool trainable() const { return trainable_; }

  // Each marks its argument read. An argument of the wrong type is an error naming it.
  Expected<int64_t> integer(const std::string& key);
  Expected<int64_t> integer(const std::string& key, int64_t fallback);
  Expected<double> number(const std::string& key, double fallback);
  Expected<bool> boolean(const std::string& key, bool fallback);
  Expected<std::string> string(const std::string& key, const std::string& fallback);
  /// An int or a list of ints ("kernel_size": 3 or [3, 3]), `count` long when a single int
  /// stands for all.
  Expected<std::vector<int64_t>> integers(const std::string& key, size_t count,
                                          std::vector<int64_t> fallback = {});
  /// A list of ints or null (null: nullopt).
  Expected<std::optional<std::vector<int64_t>>> optional_integers(const std::string& key);
  /// An activation by name or as a serialized function ({"class_name": "function",
  /// "config": "relu"}); null or absent is `fallback`.
  Expected<ActFn> activation(const std::string& key, const std::string& fallback = "linear");
  /// An initializer (Keras's serialized form, or its name); unsupported kinds are errors
  /// naming them. `fallback` when absent.
  Expected<Initializer> initializer(const std::string& key, Initializer fallback);
  /// A seed for this layer's weight `weight` when its initializer names none: a hash of the
  /// names, so every process of a job draws the same initial values.
  uint64_t seed_for(const std::string& weight) const;
  /// A list of strings or ints as strings (a lookup layer's vocabulary), or a path to a
  /// vocabulary file among the assets; absent: empty.
  Expected<std::vector<std::string>> vocabulary(const std::string& key);
  /// The raw value (null if absent), marked read.
  const nlohmann::json& raw(const std::string& key);
  bool has(const std::string& key) const;

  /// Reads `key` and accepts it only absent, null, or equal to one of `allowed` (as JSON
  /// text, e.g. "null", "0.0", "\"valid\""): arguments whose other values Troupe does not
  /// implement.
  Status allow(const std::string& key, const std::vector<std::string>& allowed);
  /// allow(key, {"null"}): regularizers, constraints, masks.
  Status allow_null(const std::string& key) { return allow(key, {"null"}); }

  /// Every argument not read is an error naming the layer, its class and the argument.
  Status finish();

  /// "layer 'dense' (Dense): argument 'units' = 0: <what>".
  Error error(const std::string& key, const std::string& what) const;

 private:
  const nlohmann::json* find(const std::string& key);

  std::string class_name_;
  std::string name_;
  bool trainable_ = true;
  std::unique_ptr<nlohmann::json> config_;
  const std::map<std::string, std::string>* assets_;
  std::set<std::string> read_;
};

}  // namespace troupe::core::graph
