// Keras's losses and metrics by their names and serialized forms (keras/src/losses,
// keras/src/metrics, keras/src/trainers/compile_utils.py's get_loss and get_metric): the
// ones Troupe has, with every argument other than its default refused by name.
#include <utility>

#include "core/keras/keras_objects.hpp"

namespace troupe::core::keras::detail {

using nlohmann::json;

namespace {

enum class Resolved { binary, sparse, categorical };

// Keras's is_binary_or_sparse_categorical (binary first), on shapes without the batch axis.
Resolved resolve(const Shapes& s) {
  if (s.pred.back() == 1) return Resolved::binary;
  if (s.label.size() < s.pred.size() ||
      (!s.label.empty() && s.label.back() == 1 && s.pred.back() > 1))
    return Resolved::sparse;
  return Resolved::categorical;
}

// ---- Losses ----

enum class LossBase { bce, cce, scce, mse };

// losses.get's keys for the losses Troupe has: class names, function names, aliases.
constexpr std::pair<const char*, LossBase> kLossNames[] = {
    {"binary_crossentropy", LossBase::bce},
    {"BinaryCrossentropy", LossBase::bce},
    {"bce", LossBase::bce},
    {"BCE", LossBase::bce},
    {"categorical_crossentropy", LossBase::cce},
    {"CategoricalCrossentropy", LossBase::cce},
    {"sparse_categorical_crossentropy", LossBase::scce},
    {"SparseCategoricalCrossentropy", LossBase::scce},
    {"mean_squared_error", LossBase::mse},
    {"MeanSquaredError", LossBase::mse},
    {"mse", LossBase::mse},
    {"MSE", LossBase::mse},
};

LossSpec make_loss(LossBase b, bool from_logits, std::string name) {
  LossSpec s;
  s.name = std::move(name);
  switch (b) {
    case LossBase::bce:
      s.kind = from_logits ? LossKind::binary_crossentropy_logits : LossKind::binary_crossentropy;
      break;
    case LossBase::cce:
      s.kind = from_logits ? LossKind::categorical_crossentropy_logits
                           : LossKind::categorical_crossentropy;
      break;
    case LossBase::scce:
      s.kind = from_logits ? LossKind::sparse_categorical_crossentropy_logits
                           : LossKind::sparse_categorical_crossentropy;
      break;
    case LossBase::mse:
      s.kind = LossKind::mean_squared_error;
      break;
  }
  return s;
}

Error unknown_loss(const std::string& name, const std::string& output) {
  return config_error("loss '" + name + "' of output '" + output +
                      "' is not supported (Troupe has binary_crossentropy, "
                      "categorical_crossentropy, sparse_categorical_crossentropy, "
                      "mean_squared_error and crossentropy)");
}

// A loss by name: losses.get's, or "crossentropy"/"ce", which Keras resolves from shapes.
Expected<LossSpec> loss_by_name(const std::string& name, const Shapes& shapes,
                                const std::string& output) {
  const std::string l = lower(name);
  if (l == "crossentropy" || l == "ce") {
    if (shapes.pred.empty())
      return config_error("loss '" + name + "' of output '" + output +
                          "': Keras resolves it from the last axis of predictions that have "
                          "none per example");
    switch (resolve(shapes)) {
      case Resolved::binary:
        return make_loss(LossBase::bce, false, name);
      case Resolved::sparse:
        return make_loss(LossBase::scce, false, name);
      case Resolved::categorical:
        return make_loss(LossBase::cce, false, name);
    }
  }
  for (const auto& [n, b] : kLossNames)
    if (name == n) return make_loss(b, false, name);
  return unknown_loss(name, output);
}

}  // namespace

Expected<LossSpec> parse_loss(const json& j, const Shapes& shapes, const std::string& output) {
  if (j.is_string()) return loss_by_name(j.get<std::string>(), shapes, output);
  if (!is_serialized_object(j))
    return config_error("loss of output '" + output + "' = " + dump_short(j) +
                        " is neither a loss's name nor a serialized loss");
  const std::string cls = j["class_name"].is_string() ? j["class_name"].get<std::string>() : "";
  if (cls == "function") {  // a loss function: {"class_name": "function", "config": "mse"}
    if (!j["config"].is_string()) return unknown_loss(dump_short(j), output);
    return loss_by_name(j["config"].get<std::string>(), shapes, output);
  }
  const LossBase* base = nullptr;
  for (const auto& [n, b] : kLossNames)
    if (cls == n && std::isupper(static_cast<unsigned char>(cls[0])) != 0) base = &b;
  if (base == nullptr) return unknown_loss(cls, output);
  KerasArgs a("loss '" + cls + "' of output '" + output + "'", j["config"]);
  const json* n = a.get("name");
  const std::string name = n != nullptr && n->is_string() ? n->get<std::string>() : cls;
  if (auto st = a.allow("reduction", {"sum_over_batch_size"}); !st) return st.error();
  if (auto st = a.allow("dtype", {"float32"}); !st) return st.error();
  bool from_logits = false;
  if (*base != LossBase::mse) {
    auto fl = a.boolean("from_logits", false);
    if (!fl) return fl.error();
    from_logits = *fl;
    if (auto st = a.allow("axis", {-1}); !st) return st.error();
  }
  if (*base == LossBase::bce || *base == LossBase::cce)
    if (auto st = a.allow("label_smoothing", {0}); !st) return st.error();
  if (*base == LossBase::scce)
    if (auto st = a.allow_null("ignore_class"); !st) return st.error();
  if (auto st = a.finish(); !st) return st.error();
  return make_loss(*base, from_logits, name);
}

namespace {

// ---- Metrics ----

// metrics.get's keys for the metrics Troupe has (and the functions of the same names).
constexpr std::pair<const char*, MetricKind> kMetricNames[] = {
    {"binary_accuracy", MetricKind::binary_accuracy},
    {"BinaryAccuracy", MetricKind::binary_accuracy},
    {"categorical_accuracy", MetricKind::categorical_accuracy},
    {"CategoricalAccuracy", MetricKind::categorical_accuracy},
    {"sparse_categorical_accuracy", MetricKind::sparse_categorical_accuracy},
    {"SparseCategoricalAccuracy", MetricKind::sparse_categorical_accuracy},
    {"auc", MetricKind::auc},
    {"AUC", MetricKind::auc},
    {"mean_squared_error", MetricKind::mean_squared_error},
    {"MeanSquaredError", MetricKind::mean_squared_error},
    {"mse", MetricKind::mean_squared_error},
    {"MSE", MetricKind::mean_squared_error},
};

Error unknown_metric(const std::string& name, const std::string& output) {
  return config_error("metric '" + name + "' of output '" + output +
                      "' is not supported (Troupe has accuracy, binary_accuracy, "
                      "categorical_accuracy, sparse_categorical_accuracy, auc and "
                      "mean_squared_error)");
}

// A metric without its History prefix: `name` is the string it was asked by or its
// object's name, as Keras's get_metric names it.
Expected<MetricSpec> parse_unchecked_metric(const json& j, const Shapes& shapes,
                                            const std::string& output) {
  MetricSpec m;
  if (j.is_string()) {
    const std::string s = j.get<std::string>();
    m.name = s;
    if (lower(s) == "accuracy" || lower(s) == "acc") {
      if (shapes.pred.empty())
        return config_error("metric '" + s + "' of output '" + output +
                            "': Keras resolves it from the last axis of predictions that have "
                            "none per example");
      switch (resolve(shapes)) {
        case Resolved::binary:
          m.kind = MetricKind::binary_accuracy;
          break;
        case Resolved::sparse:
          m.kind = MetricKind::sparse_categorical_accuracy;
          break;
        case Resolved::categorical:
          m.kind = MetricKind::categorical_accuracy;
          break;
      }
      return m;
    }
    for (const auto& [n, k] : kMetricNames)
      if (s == n) {
        m.kind = k;
        return m;
      }
    return unknown_metric(s, output);
  }
  if (j.is_null()) return config_error("a metric of output '" + output + "' is null");
  if (!is_serialized_object(j))
    return config_error("metric of output '" + output + "' = " + dump_short(j) +
                        " is neither a metric's name nor a serialized metric");
  const std::string cls = j["class_name"].is_string() ? j["class_name"].get<std::string>() : "";
  if (cls == "function") {  // keras.metrics.binary_accuracy etc.: named after the function
    const std::string fn = j["config"].is_string() ? j["config"].get<std::string>() : "";
    for (const auto& [n, k] : kMetricNames)
      if (fn == n && fn != "auc" && fn != "mse") {
        m.kind = k;
        m.name = fn;
        return m;
      }
    return unknown_metric(fn.empty() ? dump_short(j) : fn, output);
  }
  bool known = false;
  for (const auto& [n, k] : kMetricNames)
    if (cls == n && std::isupper(static_cast<unsigned char>(cls[0])) != 0) {
      m.kind = k;
      known = true;
    }
  if (!known) return unknown_metric(cls, output);
  KerasArgs a("metric '" + cls + "' of output '" + output + "'", j["config"]);
  const json* n = a.get("name");
  m.name = n != nullptr && n->is_string() ? n->get<std::string>() : cls;
  if (auto st = a.allow("dtype", {"float32"}); !st) return st.error();
  if (m.kind == MetricKind::binary_accuracy) {
    auto t = a.number("threshold", 0.5);
    if (!t) return t.error();
    m.threshold = static_cast<float>(*t);
  }
  if (m.kind == MetricKind::auc) {
    auto t = a.integer("num_thresholds", 200);
    if (!t) return t.error();
    if (*t < 2) return a.error("num_thresholds", "must be at least 2");
    m.num_thresholds = *t;
    auto fl = a.boolean("from_logits", false);
    if (!fl) return fl.error();
    m.from_logits = *fl;
    for (const auto& [key, value] : std::vector<std::pair<std::string, json>>{
             {"curve", "ROC"}, {"summation_method", "interpolation"}, {"multi_label", false}})
      if (auto st = a.allow(key, {value}); !st) return st.error();
    for (const char* key : {"num_labels", "label_weights", "thresholds"})
      if (auto st = a.allow_null(key); !st) return st.error();
  }
  if (auto st = a.finish(); !st) return st.error();
  return m;
}

}  // namespace

Expected<MetricSpec> parse_metric(const json& j, const Shapes& shapes, const std::string& output) {
  auto m = parse_unchecked_metric(j, shapes, output);
  if (m && shapes.pred.empty() &&
      (m->kind == MetricKind::categorical_accuracy ||
       m->kind == MetricKind::sparse_categorical_accuracy))
    return config_error("metric '" + m->name + "' of output '" + output +
                        "': predictions with no axis per example have no classes");
  return m;
}

}  // namespace troupe::core::keras::detail
