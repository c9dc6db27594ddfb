#include "actors/task_link.hpp"

#include <set>

#include <caf/io/all.hpp>

#include "net/connect.hpp"
#include "net/gate.hpp"
#include "net/wire.hpp"

namespace troupe::actors {

void reach_task(caf::event_based_actor* self, const Endpoint& at, std::chrono::milliseconds timeout,
                std::function<void(caf::actor)> on_actor, std::function<void()> on_fail) {
  auto route = net::caf_route(at.host, at.port, at.name);  // through the tunnel, with a secret
  if (!route) return on_fail();
  auto mm = self->system().middleman().actor_handle();
  self->request(mm, timeout, caf::connect_atom::value, route->host, route->port)
      .then(
          [=](caf::node_id&, caf::strong_actor_ptr& ptr, std::set<std::string>&) {
            auto found = caf::actor_cast<caf::actor>(ptr);
            if (!found || net::is_terminated(found)) return on_fail();
            on_actor(std::move(found));
          },
          [=](caf::error&) { on_fail(); });
}

void shut_down_task(caf::event_based_actor* self, const Endpoint& at, bool live,
                    std::function<void(bool)> done) {
  auto ask = [self](const caf::actor& task, std::function<void(bool)> answered) {
    self->request(task, shutdown_ack_timeout, net::shutdown_atom::value)
        .then([answered](caf::ok_atom) { answered(true); },
              [answered](caf::error&) { answered(false); });
  };
  auto afresh = [self, at, done, ask] {
    reach_task(
        self, at, shutdown_ack_timeout, [done, ask](caf::actor task) { ask(task, done); },
        [done] { done(false); });
  };
  if (!live || !at.handle || net::is_terminated(at.handle)) return afresh();
  // A handle that looks live may be a connection CAF has not yet noticed is gone (a task
  // that stalled past its heartbeats and went on): without an answer there, the task is
  // reached afresh, so that it is told rather than left serving.
  ask(at.handle, [done, afresh](bool acknowledged) {
    if (acknowledged) return done(true);
    afresh();
  });
}

void watch_task(caf::event_based_actor* self, const Endpoint& task, const uint64_t& counter) {
  self->monitor(task.handle);
  self->set_down_handler([self, &task, &counter](caf::down_msg& dm) {
    if (task.handle && dm.source == task.handle.address())
      self->send(self, net::task_down_atom::value, counter);
  });
}

caf::typed_response_promise<bool> shut_down_reply(caf::event_based_actor* self, const Endpoint& at,
                                                  bool live) {
  auto promise = self->make_response_promise<bool>();
  shut_down_task(self, at, live,
                 [promise](bool acknowledged) mutable { promise.deliver(acknowledged); });
  return promise;
}

}  // namespace troupe::actors
