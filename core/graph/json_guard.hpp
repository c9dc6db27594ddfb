#pragma once

// A model file's JSON is outside input: a reader that meets a value of another type than
// it checked for (nlohmann's value() and get() throw then) must give an error naming the
// document, never end the process. Every public reader of Keras JSON runs inside this.

#include <string>

#include <nlohmann/json.hpp>

#include "core/expected.hpp"

namespace troupe::core::graph {

/// j's member `key`, or null where j is no object or has none (nlohmann's const operator[]
/// of a missing key is undefined behaviour, not an exception).
inline const nlohmann::json& member(const nlohmann::json& j, const char* key) {
  static const nlohmann::json null;
  if (!j.is_object()) return null;
  auto it = j.find(key);
  return it == j.end() ? null : *it;
}

/// `read()`, with a nlohmann exception turned into an invalid_argument error "<what>:
/// malformed: <the exception's message>".
template <class F>
auto guard_json(const std::string& what, F&& read) -> decltype(read()) {
  try {
    return read();
  } catch (const nlohmann::json::exception& e) {
    return make_error(Errc::invalid_argument, what + ": malformed: " + e.what());
  }
}

}  // namespace troupe::core::graph
