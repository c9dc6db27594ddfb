#pragma once

// Runs a shipped program to completion and reads the JSON object on its last JSON line.

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

namespace troupe::test {

#ifdef TROUPE_BIN_DIR
/// Where the build put the programs the tests run.
inline const std::string bin = TROUPE_BIN_DIR;
#endif

struct ProgramRun {
  int exit_code = -1;
  std::string output;
  nlohmann::json last_json;
};

inline ProgramRun run_program(const std::string& command) {
  ProgramRun r;
  FILE* p = popen(command.c_str(), "r");
  if (p == nullptr) return r;
  // Whole lines, however long (a launcher's line names every task: 100 KB at 128 workers).
  char* line = nullptr;
  size_t capacity = 0;
  std::string last;
  ssize_t n;
  while ((n = ::getline(&line, &capacity, p)) > 0) {
    r.output.append(line, static_cast<size_t>(n));
    if (line[0] == '{') last.assign(line, static_cast<size_t>(n));
  }
  std::free(line);
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (!last.empty()) r.last_json = nlohmann::json::parse(last, nullptr, /*allow_exceptions=*/false);
  return r;
}

}  // namespace troupe::test
