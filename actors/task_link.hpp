#pragma once

// How the chief's proxies reach the remote tasks they stand for: at the address a task was
// first found at, through this process's tunnel when the cluster has a secret, without
// blocking the asking actor.

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include <caf/all.hpp>

namespace troupe::actors {

/// A remote worker or PS task: its actor (when connected) and the address it is looked for
/// at again when lost.
struct Endpoint {
  caf::actor handle;
  std::string host;
  uint16_t port = 0;
  std::string name;  // "ps:1": whom the handshake must find at host:port
};

/// Connects afresh to the task published at `at`'s address: `on_actor` gets its actor, or
/// `on_fail` is called when nobody answers there within `timeout` (or what answers is a
/// connection of the previous process, already terminated). Exactly one of them runs.
void reach_task(caf::event_based_actor* self, const Endpoint& at, std::chrono::milliseconds timeout,
                std::function<void(caf::actor)> on_actor, std::function<void()> on_fail);

/// How long a shutdown waits for each step: reaching a task afresh, then its acknowledgement.
/// The wait ends at the answer, so only a task that is connected but does not answer (a
/// stalled one) waits it out. 3 s, then 6 s, were too short where the chief's machine is
/// loaded: a job of 128 workers and 4 PS tasks on 2 cores, and 2 workers under the
/// sanitizers in CI, each had a task that acknowledged after the chief had stopped waiting
/// (it had exited by then, and the chief's try afresh was refused).
inline constexpr std::chrono::seconds shutdown_ack_timeout{15};
/// The longest shut_down_task takes: an ask on the live handle, then reaching the task
/// afresh and asking again, and where that actor had just ended, once more.
inline constexpr std::chrono::seconds shutdown_bound{5 * shutdown_ack_timeout};

/// Asks the task to stop serving and calls `done` once, within shutdown_bound: with "" when
/// it acknowledged, else with what happened instead ("asked on its connection: no answer
/// within 15 s; not reachable afresh at 127.0.0.1:4001"). `live`: `at.handle` is its
/// current connection; otherwise (a task known lost, or not connected) it is reached at
/// its address afresh first, as it may be back without having rejoined. A live handle
/// whose connection has dropped (a PS that stalled while nothing watched it, then went
/// on), or that gives no acknowledgement, is followed by a try afresh.
void shut_down_task(caf::event_based_actor* self, const Endpoint& at, bool live,
                    std::function<void(std::string)> done);
/// shut_down_task as a handler's answer: the promise of its "" or reason.
caf::typed_response_promise<std::string> shut_down_reply(caf::event_based_actor* self,
                                                         const Endpoint& at, bool live);

/// Monitors `task`'s current actor and, when it goes down, sends `self` (task_down,
/// `counter`) so that the proxy's state handles it in order with its other messages.
/// `task` and `counter` are members of the proxy's state (read when the down comes).
void watch_task(caf::event_based_actor* self, const Endpoint& task, const uint64_t& counter);

/// `f`, run only while `counter` (a member of the calling actor's state: its connection
/// or episode number) still has the value it has now: a reply or timer of an earlier
/// connection is dropped. Ts are the reply's argument types.
template <class... Ts, class F>
auto while_unchanged(const uint64_t& counter, F f) {
  return [&counter, at = counter, f](Ts... xs) {
    if (counter == at) f(std::forward<Ts>(xs)...);
  };
}

}  // namespace troupe::actors
