#pragma once

// Every program's command line parsed the same way, ending with one JSON line as the
// program would: CLI11's own CLI11_PARSE prints a parse error and exits 105-109 with no
// JSON, which scripts that read a program's last line cannot tell from a crash.

#include <iostream>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "core/json_text.hpp"
#include "examples/program.hpp"

namespace troupe::examples {

/// Parses `argc`/`argv` into `app`. --help (and --help-all) print the help, then
/// {"ok": true, "program", "help": true}, and end the program with 0; an error in the
/// command line ends it with fail()'s line naming what was wrong, exit_permanent (a
/// restart would not help). nullopt: parsed, the program runs.
///
///   if (auto end = examples::parse_command_line(app, argc, argv, "fmnist_ps")) return *end;
inline std::optional<int> parse_command_line(CLI::App& app, int argc, char** argv,
                                             const std::string& program) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() != 0)
      return fail(program, "command line: " + std::string(e.what()) + " (run with --help)");
    app.exit(e);  // --help, --help-all: the help, on stdout
    std::cout << core::json_text(nlohmann::json{{"ok", true}, {"program", program}, {"help", true}})
              << std::endl;
    return 0;
  }
  return std::nullopt;
}

}  // namespace troupe::examples
