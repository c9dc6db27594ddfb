#pragma once

// What every example program does the same way: end with one JSON line, also on failure.

#include <iostream>
#include <string>

#include <nlohmann/json.hpp>

#include "core/json_text.hpp"

namespace troupe::examples {

/// Prints "<program>: <what>" on stderr and {"ok": false, "program", "error"} as the last
/// line on stdout; returns the exit status 1.
inline int fail(const std::string& program, const std::string& what) {
  std::cerr << program << ": " << what << std::endl;
  std::cout << core::json_text(nlohmann::json{{"ok", false}, {"program", program}, {"error", what}})
            << std::endl;
  return 1;
}

}  // namespace troupe::examples
