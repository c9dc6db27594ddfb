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
#include "core/graph/config_args.hpp"

namespace troupe::core::keras::detail {

using namespace graph;  // the compile settings' types, ConfigArgs

/// A serialized object's config read as ConfigArgs reads it, its errors named
/// "compile_config: <what>".
class KerasArgs final : public ConfigArgs {
 public:
  KerasArgs(const std::string& what, const nlohmann::json& config)
      : ConfigArgs("compile_config: " + what, config) {}
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

}  // namespace troupe::core::keras::detail
