#pragma once

// What every example program does the same way: end with one JSON line, also on failure.

#include <iostream>
#include <string>

#include <nlohmann/json.hpp>

#include "core/json_text.hpp"
#include "troupe/exit_codes.hpp"

namespace troupe::examples {

/// Prints "<program>: <what>" on stderr and {"ok": false, "program", "error", "retryable"}
/// as the last line on stdout; returns the exit status `code` (troupe/exit_codes.hpp).
inline int fail(const std::string& program, const std::string& what, int code = exit_permanent) {
  std::cerr << program << ": " << what << std::endl;
  std::cout << core::json_text(nlohmann::json{{"ok", false},
                                              {"program", program},
                                              {"error", what},
                                              {"retryable", retryable_exit_code(code)}})
            << std::endl;
  return code;
}

/// The same for an error: exit_retryable (138) when a restart may help, else 1.
inline int fail(const std::string& program, const core::Error& e) {
  return fail(program, e.to_string(), exit_code_for(e));
}

}  // namespace troupe::examples
