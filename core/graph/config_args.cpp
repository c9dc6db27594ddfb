#include "core/graph/config_args.hpp"

#include <cmath>
#include <limits>

namespace troupe::core::graph {

using nlohmann::json;

float to_float(double v) {
  if (v > static_cast<double>(std::numeric_limits<float>::max()))
    return std::numeric_limits<float>::infinity();
  if (v < -static_cast<double>(std::numeric_limits<float>::max()))
    return -std::numeric_limits<float>::infinity();
  return static_cast<float>(v);
}

ConfigArgs::ConfigArgs(std::string context, const json& config)
    : context_(std::move(context)), config_(config.is_object() ? config : json::object()) {}

const json* ConfigArgs::get(const std::string& key) {
  read_.insert(key);
  auto it = config_.find(key);
  return it == config_.end() || it->is_null() ? nullptr : &*it;
}

const json& ConfigArgs::raw(const std::string& key) {
  static const json null;
  const json* v = get(key);
  return v == nullptr ? null : *v;
}

bool ConfigArgs::has(const std::string& key) const {
  auto it = config_.find(key);
  return it != config_.end() && !it->is_null();
}

Error ConfigArgs::error(const std::string& key, const std::string& what) const {
  std::string value;
  auto it = config_.find(key);
  if (it != config_.end()) {
    value = it->dump(-1, ' ', false, json::error_handler_t::replace);
    if (value.size() > 80) value = value.substr(0, 77) + "...";
    value = " = " + value;
  }
  return make_error(Errc::invalid_argument,
                    context_ + ": argument '" + key + "'" + value + ": " + what);
}

Expected<int64_t> ConfigArgs::integer(const std::string& key) {
  const json* v = get(key);
  if (v == nullptr) return error(key, "is required");
  if (v->is_number_integer()) return v->get<int64_t>();
  if (v->is_number_float() && std::floor(v->get<double>()) == v->get<double>() &&
      std::fabs(v->get<double>()) < 9.0e18)
    return static_cast<int64_t>(v->get<double>());
  return error(key, "must be an integer");
}

Expected<int64_t> ConfigArgs::integer(const std::string& key, int64_t fallback) {
  if (!has(key)) {
    read_.insert(key);
    return fallback;
  }
  return integer(key);
}

Expected<double> ConfigArgs::number(const std::string& key, double fallback) {
  const json* v = get(key);
  if (v == nullptr) return fallback;
  if (!v->is_number()) return error(key, "must be a number");
  // Every number of a config is computed with in float32: one beyond its range is refused
  // here, not cast (undefined behaviour) where it is used.
  const double d = v->get<double>();
  if (std::fabs(d) > static_cast<double>(std::numeric_limits<float>::max()))
    return error(key, "is beyond float32's range");
  return d;
}

Expected<bool> ConfigArgs::boolean(const std::string& key, bool fallback) {
  const json* v = get(key);
  if (v == nullptr) return fallback;
  if (v->is_boolean()) return v->get<bool>();
  return error(key, "must be true or false");
}

Expected<std::string> ConfigArgs::string(const std::string& key, const std::string& fallback) {
  const json* v = get(key);
  if (v == nullptr) return fallback;
  if (v->is_string()) return v->get<std::string>();
  return error(key, "must be a string");
}

Expected<std::vector<int64_t>> ConfigArgs::integers(const std::string& key, size_t count,
                                                    std::vector<int64_t> fallback) {
  const json* v = get(key);
  if (v == nullptr) {
    if (fallback.empty()) return error(key, "is required");
    return fallback;
  }
  if (v->is_number_integer())
    return std::vector<int64_t>(count == 0 ? 1 : count, v->get<int64_t>());
  if (!v->is_array()) return error(key, "must be an integer or a list of integers");
  std::vector<int64_t> out;
  for (const auto& e : *v) {
    if (!e.is_number_integer()) return error(key, "must be a list of integers");
    out.push_back(e.get<int64_t>());
  }
  if (count != 0 && out.size() != count)
    return error(key, "must have " + std::to_string(count) + " values");
  return out;
}

Expected<std::optional<std::vector<int64_t>>> ConfigArgs::optional_integers(
    const std::string& key) {
  if (!has(key)) {
    read_.insert(key);
    return std::optional<std::vector<int64_t>>();
  }
  auto ints = integers(key, 0);
  if (!ints) return ints.error();
  return std::optional<std::vector<int64_t>>(std::move(*ints));
}

Status ConfigArgs::allow(const std::string& key, const std::vector<json>& allowed) {
  const json* v = get(key);
  if (v == nullptr) return {};
  for (const auto& a : allowed)
    if (*v == a || (v->is_number() && a.is_number() && v->get<double>() == a.get<double>()))
      return {};
  std::string known;
  for (const auto& a : allowed)
    known += (known.empty() ? "" : " or ") + a.dump();
  return error(key, known.empty() ? "Troupe supports only its default, null"
                                  : "Troupe supports only " + known);
}

Status ConfigArgs::finish() const {
  for (auto it = config_.begin(); it != config_.end(); ++it)
    if (read_.count(it.key()) == 0) return error(it.key(), "is not supported by Troupe");
  return {};
}

}  // namespace troupe::core::graph
