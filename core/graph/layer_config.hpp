#pragma once

// A Keras layer's config, as a layer's factory reads it: each argument asked for by name,
// with its default, so that whatever a layer does not read is known. finish() then makes
// every argument left unread an error naming the layer, its class and the argument: a
// model never trains with an option silently ignored.
//
//   Expected<std::unique_ptr<Layer>> make_dense(LayerConfig& c) {
//     auto units = c.integer("units");
//     auto act = c.activation("activation", "linear");
//     c.allow_null("kernel_regularizer");             // only its default is supported
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
#include "core/graph/config_args.hpp"
#include "core/layer_ops.hpp"
#include "core/partitioner.hpp"

namespace troupe::core::graph {

class LayerConfig final : public ConfigArgs {
 public:
  /// `config` is the layer's "config" object; `assets` the .keras file's other entries
  /// (a lookup layer's vocabulary file), or null. Errors name "layer '<name>' (<class>)".
  LayerConfig(std::string class_name, const nlohmann::json& config,
              const std::map<std::string, std::string>* assets = nullptr);

  const std::string& class_name() const { return class_name_; }
  const std::string& name() const { return name_; }
  bool trainable() const { return trainable_; }

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

 private:
  std::string class_name_;
  std::string name_;
  bool trainable_ = true;
  const std::map<std::string, std::string>* assets_;
};

}  // namespace troupe::core::graph
