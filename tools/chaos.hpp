#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "core/expected.hpp"
#include "net/cluster_spec.hpp"

namespace troupe::tools {

/// One failure to inject into a local cluster, parsed from
///   ACTION:TYPE:INDEX@TIME[+DURATION]
/// ACTION is `kill` (SIGKILL) or `stop` (SIGSTOP, then SIGCONT after DURATION); TYPE and
/// INDEX name a task; TIME and DURATION are seconds after launch, written `1.5s` or
/// `800ms`. Examples: `kill:worker:1@5s`, `stop:worker:0@3s+2s`, `kill:ps:0@10s`.
struct ChaosEvent {
  enum class Action { kill, stop };
  Action action = Action::kill;
  net::TaskId task;
  std::chrono::milliseconds at{0};
  std::chrono::milliseconds duration{0};  // stop only

  std::string to_string() const;
};

/// Parses one event; a malformed spec is an invalid_argument error quoting it.
core::Expected<ChaosEvent> parse_chaos(const std::string& spec);

}  // namespace troupe::tools
