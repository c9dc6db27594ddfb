#pragma once

// Outside JSON (a model file's config.json, a model sent between tasks, a compile config)
// read with a bounded stack: nlohmann's parser keeps its own stack, but copying, comparing
// and writing a document recurse once per level, so a config nested 200,000 arrays deep
// would overflow the stack long after it parsed. Its depth is measured first, on the text,
// in one pass that keeps no stack; a document deeper than the limit is an error naming it.
// Header-only: include it only where nlohmann_json is linked.
//
//   auto config = core::parse_json_bounded(text, path + ": config.json");

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "core/expected.hpp"

namespace troupe::core {

/// Keras's configs nest about a dozen levels (a nested model adds as many again): the
/// limit leaves room for any real one and none for a stack overflow.
inline constexpr int kMaxJsonDepth = 128;

/// The deepest nesting of arrays and objects in `text` (brackets inside strings not
/// counted); text that is not JSON gives whatever its brackets say.
inline int json_depth(const std::string& text) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char ch : text) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (ch == '\\')
        escaped = true;
      else if (ch == '"')
        in_string = false;
      continue;
    }
    if (ch == '"') {
      in_string = true;
    } else if (ch == '[' || ch == '{') {
      if (++depth > deepest) deepest = depth;
    } else if (ch == ']' || ch == '}') {
      --depth;
    }
  }
  return deepest;
}

/// `text` parsed; deeper than `max_depth`, or not JSON, an invalid_argument error beginning
/// with `what` ("model.keras: config.json").
inline Expected<nlohmann::json> parse_json_bounded(const std::string& text, const std::string& what,
                                                   int max_depth = kMaxJsonDepth) {
  if (const int d = json_depth(text); d > max_depth)
    return make_error(Errc::invalid_argument, what + ": JSON nested " + std::to_string(d) +
                                                  " levels deep, over the limit of " +
                                                  std::to_string(max_depth));
  auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return make_error(Errc::invalid_argument, what + ": not JSON");
  return j;
}

}  // namespace troupe::core
