#include "actors/task_link.hpp"

#include <set>

#include <caf/io/all.hpp>

#include "net/connect.hpp"
#include "net/gate.hpp"
#include "net/wire.hpp"

namespace troupe::actors {

namespace {

// One try of reaching the task: `on_error` gets what went wrong (an actor found terminated
// there, one of the connection CAF is replacing, is sec::remote_linking_failed).
void reach_once(caf::event_based_actor* self, const Endpoint& at, std::chrono::milliseconds timeout,
                std::function<void(caf::actor)> on_actor,
                std::function<void(const caf::error&)> on_error) {
  auto route = net::caf_route(at.host, at.port, at.name);  // through the tunnel, with a secret
  if (!route) return on_error(caf::sec::cannot_connect_to_node);
  auto mm = self->system().middleman().actor_handle();
  self->request(mm, timeout, caf::connect_atom::value, route->host, route->port)
      .then(
          [=](caf::node_id&, caf::strong_actor_ptr& ptr, std::set<std::string>&) {
            auto found = caf::actor_cast<caf::actor>(ptr);
            if (!found || net::is_terminated(found))
              return on_error(caf::sec::remote_linking_failed);
            on_actor(std::move(found));
          },
          [=](caf::error& e) { on_error(e); });
}

// Answers `get` with `ok` after `wait`, then ends: a delay an event-based actor can chain a
// callback to (request(...).then(...)) without a handler of its own.
caf::behavior answer_after(caf::event_based_actor* self, std::chrono::milliseconds wait) {
  return {[=](caf::get_atom) {
    auto promise = self->make_response_promise<caf::ok_atom>();
    self->delayed_send(self, wait, caf::ok_atom::value);
    self->become([=](caf::ok_atom) mutable {
      promise.deliver(caf::ok_atom::value);
      self->quit();
    });
    return promise;
  }};
}

// reach_once again every 250 ms until `deadline`, unless nobody listens at the address (the
// task is gone). Seen at the end of a job: a task just resumed from a stall, still holding
// the connection the chief had dropped, cut the chief's new handshake, and was left serving.
void reach_until(caf::event_based_actor* self, const Endpoint& at,
                 std::chrono::steady_clock::time_point deadline,
                 std::function<void(caf::actor)> on_actor,
                 std::function<void(std::string)> on_fail) {
  using namespace std::chrono;
  const auto left = duration_cast<milliseconds>(deadline - steady_clock::now());
  if (left <= milliseconds(0))
    return on_fail(caf::to_string(caf::error(caf::sec::request_timeout)));
  reach_once(self, at, left, on_actor, [=](const caf::error& e) {
    const milliseconds pause(250);
    if (e == caf::sec::cannot_connect_to_node || steady_clock::now() + pause >= deadline)
      return on_fail(caf::to_string(e));
    self->request(self->spawn(answer_after, pause), caf::infinite, caf::get_atom::value)
        .then([=](caf::ok_atom) { reach_until(self, at, deadline, on_actor, on_fail); },
              [=](caf::error& timer) { on_fail(caf::to_string(timer)); });
  });
}

}  // namespace

void reach_task(caf::event_based_actor* self, const Endpoint& at, std::chrono::milliseconds timeout,
                std::function<void(caf::actor)> on_actor, std::function<void()> on_fail) {
  reach_once(self, at, timeout, std::move(on_actor),
             [on_fail = std::move(on_fail)](const caf::error&) { on_fail(); });
}

void shut_down_task(caf::event_based_actor* self, const Endpoint& at, bool live,
                    std::function<void(std::string)> done) {
  // `answered` gets no error on the acknowledgement, else what came instead.
  auto ask = [self](const caf::actor& task, std::function<void(caf::error)> answered) {
    self->request(task, shutdown_ack_timeout, net::shutdown_atom::value)
        .then([answered](caf::ok_atom) { answered(caf::error{}); },
              [answered](caf::error& e) { answered(std::move(e)); });
  };
  auto text = [](const caf::error& e) {
    return e == caf::sec::request_timeout
               ? "no answer within " + std::to_string(shutdown_ack_timeout.count()) + " s"
               : "an error, " + caf::to_string(e);
  };
  const std::string where = at.host + ":" + std::to_string(at.port);
  // `asked`: a shutdown sent on its live connection before went unanswered.
  auto afresh = [self, at, done, ask, text, where](std::string before, bool asked) {
    reach_until(
        self, at, std::chrono::steady_clock::now() + shutdown_ack_timeout,
        [self, at, done, ask, text, before, asked](caf::actor task) {
          ask(task, [self, at, done, ask, text, before, asked](caf::error e) {
            if (!e) return done(std::string());
            if (e != caf::sec::request_receiver_down || !asked)
              return done(before + "reached afresh: " + text(e));
            // Its process answered but the actor it served had just ended: it stopped after
            // the first request, whose answer was late or lost (seen under the sanitizers: the
            // task logged its acknowledgement, the chief had given up on it). Unless a
            // supervisor has put a new one in its place, which is then asked too. (An actor
            // never asked before that has ended, ended on its own: it stays silent.)
            reach_task(
                self, at, shutdown_ack_timeout,
                [done, ask, text, before](caf::actor again) {
                  ask(again, [done, text, before](caf::error w) {
                    done(w ? before + "reached afresh twice: " + text(w) : std::string());
                  });
                },
                [done] { done(std::string()); });
          });
        },
        [done, before, where](std::string why) {
          done(before + "not reachable afresh at " + where + " (" + why + ")");
        });
  };
  if (!live || !at.handle || net::is_terminated(at.handle))
    return afresh(live ? "its connection had ended; " : "lost before; ", false);
  // A handle that looks live may be a connection CAF has not yet noticed is gone (a task
  // that stalled past its heartbeats and went on): without an answer there, the task is
  // reached afresh, so that it is told rather than left serving.
  ask(at.handle, [done, afresh, text](caf::error e) {
    if (!e) return done(std::string());
    // Only a request that went unanswered may have reached it; an error (a dropped
    // connection) says it may not have.
    afresh("asked on its connection: " + text(e) + "; ", e == caf::sec::request_timeout);
  });
}

void watch_task(caf::event_based_actor* self, const Endpoint& task, const uint64_t& counter) {
  self->monitor(task.handle);
  self->set_down_handler([self, &task, &counter](caf::down_msg& dm) {
    if (task.handle && dm.source == task.handle.address())
      self->send(self, net::task_down_atom::value, counter);
  });
}

caf::typed_response_promise<std::string> shut_down_reply(caf::event_based_actor* self,
                                                         const Endpoint& at, bool live) {
  auto promise = self->make_response_promise<std::string>();
  shut_down_task(self, at, live,
                 [promise](std::string why) mutable { promise.deliver(std::move(why)); });
  return promise;
}

}  // namespace troupe::actors
