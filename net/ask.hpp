#pragma once
// A request from a blocking actor (a scoped_actor on a worker's or a channel's thread)
// that waits a bounded time for its answer.
//
// CAF 0.17's own bound, request(dest, timeout, ...), puts an entry in the actor system's
// clock that stays until the timeout fires, answered or not (about 220 bytes each): fine
// for a call made once, a leak-shaped cost for one made per step or per tensor batch
// (thousands a second, each held for the whole timeout). ask() sends the request unbounded
// and bounds the receive instead: a blocking receive with an `after` clause waits on the
// actor's own mailbox until an absolute deadline and leaves nothing behind.
//
// An answer that comes after the deadline stays in the blocking actor's mailbox (its id
// matches no later ask); that is one message per timed-out call, which is already an error.

#include <chrono>
#include <string>
#include <utility>

#include <caf/all.hpp>

#include "core/expected.hpp"
#include "net/wire.hpp"

namespace troupe::net {

/// How long ask() waits, what the error names, and where it says that the time ran out.
struct AskBound {
  std::chrono::milliseconds timeout;
  std::string what;
  bool* timed_out = nullptr;  // set when no answer came in time (else left alone)
};

/// Sends `xs...` to `dest` and waits at most `bound.timeout` for the answer, which goes to
/// `on_value` (a handler taking the answer's types, as for CAF's receive). Returns the
/// destination's error, or unavailable naming `bound.what` when no answer came in time.
template <class OnValue, class... Ts>
core::Status ask(caf::blocking_actor& self, const caf::actor& dest, const AskBound& bound,
                 OnValue on_value, Ts&&... xs) {
  auto handle = self.request(dest, caf::infinite, std::forward<Ts>(xs)...);
  core::Status result;
  bool timed_out = false;
  caf::blocking_actor::accept_one_cond one;
  self.varargs_receive(
      one, handle.id(), std::move(on_value), [&](caf::error& e) { result = from_caf(e); },
      caf::after(bound.timeout) >> [&] { timed_out = true; });
  if (!timed_out) return result;
  if (bound.timed_out) *bound.timed_out = true;
  return core::make_error(
      core::Errc::unavailable,
      bound.what + ": no answer within " + std::to_string(bound.timeout.count()) + " ms");
}

}  // namespace troupe::net
