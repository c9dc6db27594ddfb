#pragma once

// Runs a shipped program to completion and reads the JSON object on its last JSON line.

#include <sys/wait.h>

#include <cstdio>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

namespace troupe::test {

struct ProgramRun {
  int exit_code = -1;
  std::string output;
  nlohmann::json last_json;
};

inline ProgramRun run_program(const std::string& command) {
  ProgramRun r;
  FILE* p = popen(command.c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  std::string last;
  while (std::fgets(buf, sizeof buf, p)) {
    r.output += buf;
    if (buf[0] == '{') last = buf;
  }
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (!last.empty()) r.last_json = nlohmann::json::parse(last, nullptr, /*allow_exceptions=*/false);
  return r;
}

}  // namespace troupe::test
