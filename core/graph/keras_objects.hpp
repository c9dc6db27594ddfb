#pragma once

// Internal to core/graph/compile.cpp, keras_objects.cpp and keras_optimizer.cpp: the
// "config" of a serialized Keras object (a loss, metric, optimizer or schedule) read
// argument by argument, as LayerConfig reads a layer's: each argument asked for with its
// default, or accepted only at the values Troupe implements; finish() makes every argument
// left unread an error naming the object and it. And the losses and metrics by Keras's
// names (keras_objects.cpp).

#include <algorithm>
#include <cctype>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/expected.hpp"
#include "core/graph/compile.hpp"

namespace troupe::core::graph::detail {

class KerasArgs {
 public:
  /// `what` names the object in errors: "loss 'BinaryCrossentropy' of output 'click'".
  KerasArgs(std::string what, const nlohmann::json& config)
      : what_(std::move(what)), config_(config.is_object() ? config : nlohmann::json::object()) {}

  /// The value of `key`, null when absent or null; marks it read.
  const nlohmann::json* get(const std::string& key) {
    read_.insert(key);
    auto it = config_.find(key);
    return it == config_.end() || it->is_null() ? nullptr : &*it;
  }
  /// Reads `key` and ignores it (a name, or an argument that only matters with another).
  void ignore(const std::string& key) { read_.insert(key); }

  Expected<double> number(const std::string& key, double fallback) {
    const nlohmann::json* v = get(key);
    if (v == nullptr) return fallback;
    if (!v->is_number()) return error(key, "must be a number");
    return v->get<double>();
  }
  Expected<bool> boolean(const std::string& key, bool fallback) {
    const nlohmann::json* v = get(key);
    if (v == nullptr) return fallback;
    if (!v->is_boolean()) return error(key, "must be true or false");
    return v->get<bool>();
  }
  Expected<int64_t> integer(const std::string& key, int64_t fallback) {
    const nlohmann::json* v = get(key);
    if (v == nullptr) return fallback;
    if (v->is_number_integer()) return v->get<int64_t>();
    if (v->is_number_float() &&
        v->get<double>() == static_cast<double>(static_cast<int64_t>(v->get<double>())))
      return static_cast<int64_t>(v->get<double>());
    return error(key, "must be an integer");
  }
  /// Accepts `key` only absent, null, or equal to one of `allowed` (JSON values; numbers
  /// compare by value, so 0 and 0.0 are one).
  Status allow(const std::string& key, const std::vector<nlohmann::json>& allowed) {
    const nlohmann::json* v = get(key);
    if (v == nullptr) return {};
    for (const auto& a : allowed)
      if (*v == a || (v->is_number() && a.is_number() && v->get<double>() == a.get<double>()))
        return {};
    std::string known;
    for (const auto& a : allowed)
      known += (known.empty() ? "" : " or ") + a.dump();
    return error(key, known.empty() ? "is not supported by Troupe (only its default, null)"
                                    : "is not supported by Troupe (only " + known + ")");
  }
  Status allow_null(const std::string& key) { return allow(key, {}); }

  /// Every argument not read is an error naming it.
  Status finish() const {
    for (auto it = config_.begin(); it != config_.end(); ++it)
      if (read_.count(it.key()) == 0) return error(it.key(), "is not an argument Troupe knows");
    return {};
  }

  /// "<what>: argument 'key' = <value>: <message>" as an invalid_argument error.
  Error error(const std::string& key, const std::string& message) const {
    std::string value;
    auto it = config_.find(key);
    if (it != config_.end()) {
      value = it->dump();
      if (value.size() > 80) value = value.substr(0, 77) + "...";
      value = " = " + value;
    }
    return make_error(Errc::invalid_argument, "compile_config: " + what_ + ": argument '" + key +
                                                  "'" + value + " " + message);
  }

 private:
  std::string what_;
  nlohmann::json config_;
  std::set<std::string> read_;
};

/// A serialized Keras object: {"class_name": ..., "config": ...} (with "module" and
/// "registered_name" beside them).
inline bool is_serialized_object(const nlohmann::json& j) {
  return j.is_object() && j.contains("class_name") && j.contains("config");
}

inline Error config_error(const std::string& what) {
  return make_error(Errc::invalid_argument, "compile_config: " + what);
}

inline std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

/// A value in an error message, cut at 80 characters.
inline std::string dump_short(const nlohmann::json& j) {
  std::string s = j.dump();
  return s.size() > 80 ? s.substr(0, 77) + "..." : s;
}

/// What Keras's is_binary_or_sparse_categorical sees of one output: the predictions' and
/// the labels' shapes per example.
struct Shapes {
  std::vector<int64_t> pred;
  std::vector<int64_t> label;
};

/// An output's loss: a name as losses.get takes it, "crossentropy" (resolved from
/// `shapes`), a loss function ({"class_name": "function"}) or a serialized Loss.
Expected<LossSpec> parse_loss(const nlohmann::json& j, const Shapes& shapes,
                              const std::string& output);
/// An output's metric, named as Keras's get_metric names it (without the output's prefix):
/// by the string it was asked by or its object's "name"; "accuracy"/"acc" resolved from
/// `shapes`.
Expected<MetricSpec> parse_metric(const nlohmann::json& j, const Shapes& shapes,
                                  const std::string& output);

}  // namespace troupe::core::graph::detail
