#pragma once

// Header-only; include it only where nlohmann_json is linked (net, api, tools, examples,
// bench). troupe_core itself does not use it.

#include <string>

#include <nlohmann/json.hpp>

namespace troupe::core {

/// `j` as JSON text. Strings that are not valid UTF-8 (a path or a message holding bytes
/// from outside) are written with U+FFFD in place of the bad bytes instead of throwing:
/// a program's last JSON line must never abort it.
inline std::string json_text(const nlohmann::json& j, int indent = -1) {
  return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace troupe::core
