#pragma once

#include <chrono>
#include <deque>
#include <functional>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "core/expected.hpp"
#include "net/wire.hpp"

namespace troupe::actors {

/// Which children a supervisor restarts when one fails (Erlang/OTP's strategies).
enum class RestartStrategy {
  one_for_one,   // only the failed child
  one_for_all,   // every child: they depend on each other
  rest_for_one,  // the failed child and every child started after it
};

/// When a child that ended is started again.
enum class RestartPolicy {
  permanent,  // always, even after a normal exit
  transient,  // only after an abnormal exit
  temporary,  // never; the child is forgotten
};

/// One supervised child: how to start it, under which policy.
struct ChildSpec {
  std::string name;
  /// Spawns the child and does what must follow each start (say, publishing it on its
  /// port). An error counts as a failure of the child.
  std::function<core::Expected<caf::actor>(caf::actor_system&)> start;
  RestartPolicy restart = RestartPolicy::permanent;
};

struct SupervisorOptions {
  std::string name = "supervisor";
  RestartStrategy strategy = RestartStrategy::one_for_one;
  /// At most `intensity` restarts within any `period`; one more and the supervisor gives
  /// up: it stops its children and exits with an error naming the child and its last exit
  /// reason, which its own supervisor (or whoever monitors it) handles in turn.
  int intensity = 3;
  std::chrono::milliseconds period{5000};
  /// Exit normally once no child is running or about to be restarted (every child was
  /// transient or temporary and has ended): the supervised work is done.
  bool exit_when_done = false;
  /// Called (on the supervisor's thread) after each restart with the child's name and the
  /// supervisor's restart count; and with an empty name when it gives up.
  std::function<void(const std::string& child, int64_t restarts)> on_restart;
};

struct SupervisorState {
  struct Child {
    ChildSpec spec;
    caf::actor handle;  // null while not running
  };
  std::vector<Child> children;
  SupervisorOptions options;
  std::deque<std::chrono::steady_clock::time_point> recent;  // restarts within the period
  int64_t restarts = 0;
  static inline const char* name = "troupe.supervisor";
};

using net::which_atom;

/// A supervisor: starts `children` in order and monitors them; a child's exit is a message
/// handled by the restart strategy, never an abort. Messages:
///   (which, name) -> the child's current actor (not_found for an unknown or forgotten name)
///   (stats)       -> [i64]: restarts so far, children running
/// Starting the children fails like a restart that fails. An exit message (a parent
/// stopping it) stops every child, then the supervisor.
caf::behavior supervisor(caf::stateful_actor<SupervisorState>* self,
                         std::vector<ChildSpec> children, SupervisorOptions options);

}  // namespace troupe::actors
