#include "net/connect.hpp"

#include <algorithm>
#include <thread>

#include <sys/socket.h>

#include <caf/io/all.hpp>
#include <caf/io/basp_broker.hpp>

#include "net/cluster_spec.hpp"
#include "net/gate.hpp"
#include "net/socket.hpp"

namespace troupe::net {

namespace {

std::string ms_text(std::chrono::milliseconds t) {
  return std::to_string(t.count()) + " ms";
}

struct Attempt {
  core::Expected<caf::actor> actor;
  /// The peer closed the connection before its handshake: its process runs (a stopped
  /// one's kernel accepts and holds connections, it does not close them).
  bool closed_by_peer = false;
};

// CAF 0.17.6 starts the context of a connection it dials with a zero `last_seen`, so its
// next heartbeat tick (at most middleman.heartbeat-interval away, 100 ms by default) closes
// that connection as `connection_timeout` unless the peer's handshake has arrived by then,
// whatever middleman.connection-timeout says (measured: a silent listener fails every
// remote_actor after one heartbeat interval, with the timeout at 5 s). A peer slower than
// one tick to answer, a PS that hundreds of workers dial at once, could never be reached.
// So dial the socket here, wait up to `budget` for the first bytes of the peer's handshake
// (a BASP server writes its handshake as soon as it accepts, before the client's), and only
// then hand the socket to CAF's BASP broker, which reads the bytes already there on its
// next turn (a tick already queued before that read still closes it: a rare try retried).
Attempt dial(caf::actor_system& sys, const HostPort& hp, std::chrono::milliseconds budget) {
  auto s = connect_to(hp.host, hp.port, budget);
  if (!s) return {s.error()};
  if (!wait_readable(*s, budget))
    return {core::make_error(core::Errc::unavailable,
                             "connected, but no handshake came within " + ms_text(budget))};
  char byte = 0;
  if (::recv(s->fd(), &byte, 1, MSG_PEEK | MSG_DONTWAIT) <= 0)
    return {core::make_error(core::Errc::unavailable,
                             "the peer closed the connection before "
                             "its handshake"),
            true};
  set_io_timeout(*s, std::chrono::milliseconds(0));
  auto& mm = sys.middleman();
  caf::io::scribe_ptr scribe = mm.backend().new_scribe(s->release());
  auto basp = mm.named_broker<caf::io::basp_broker>(caf::atom("BASP"));
  Attempt out{core::make_error(core::Errc::unavailable, "CAF's handshake did not finish")};
  caf::scoped_actor self{sys};
  self->request(basp, budget, caf::connect_atom_v, std::move(scribe), hp.port)
      .receive(
          [&](caf::node_id&, caf::strong_actor_ptr& addr, std::set<std::string>&) {
            if (addr)
              out.actor = caf::actor_cast<caf::actor>(addr);
            else
              out.actor = core::make_error(core::Errc::unavailable, "no actor is published there");
          },
          [&](caf::error& err) {
            out.actor = core::make_error(core::Errc::unavailable, sys.render(err));
            out.closed_by_peer = err == caf::sec::disconnect_during_handshake;
          });
  return out;
}

}  // namespace

bool is_terminated(const caf::actor& a) {
  if (!a) return true;
  auto* m = dynamic_cast<caf::monitorable_actor*>(caf::actor_cast<caf::abstract_actor*>(a));
  return m != nullptr && static_cast<bool>(m->fail_state());
}

core::Expected<caf::actor> connect_with_retry(caf::actor_system& sys, const std::string& address,
                                              const std::string& task,
                                              std::chrono::milliseconds timeout,
                                              const std::function<bool()>& give_up,
                                              Patience patience) {
  auto task_hp = parse_host_port(address);
  if (!task_hp) return task_hp.error();
  // With a cluster secret, through this process's tunnel to the task's gate.
  auto hp = caf_route(task_hp->host, task_hp->port, task);
  if (!hp)
    return core::make_error(hp.error().code, task + " at " + address + ": " + hp.error().message);
  const auto start = std::chrono::steady_clock::now();
  const auto cap = start + std::max(timeout, patience.cap);  // no patience: start + timeout
  auto deadline = start + timeout;
  auto backoff = std::chrono::milliseconds(20);
  std::string last;
  const bool tunnelled = hp->host != task_hp->host || hp->port != task_hp->port;
  for (int attempt = 1;; ++attempt) {
    const auto tried = std::chrono::steady_clock::now();
    // One try waits for the handshake up to the deadline, within the process's bound on a
    // link's handshake (a try that ends sooner leaves time for the next).
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - tried);
    auto a =
        dial(sys, *hp, std::clamp(left, std::chrono::milliseconds(50), link_handshake_timeout()));
    if (a.actor && !is_terminated(*a.actor)) return *a.actor;
    last = a.actor ? std::string("the previous process's connection, not yet dropped")
                   : a.actor.error().message;
    const auto now = std::chrono::steady_clock::now();
    // A sign that the process itself runs, not only its kernel (a stopped process's port
    // still accepts TCP connections): through a tunnel, a handshake in which it proved the
    // secret; directly, a connection it closed before its handshake.
    const bool alive =
        tunnelled ? tunnel_reached(task_hp->host, task_hp->port) >= tried : a.closed_by_peer;
    if (alive && patience.window.count() > 0)
      deadline = std::max(deadline, std::min(now + patience.window, cap));
    if (give_up && give_up())
      return core::make_error(core::Errc::unavailable,
                              task + " at " + address + " is no longer tried (" + last + ")");
    if (now >= deadline) {
      // CAF sees a tunnel that closed a try as any closed connection: say why it closed.
      if (tunnelled)
        if (auto f = tunnel_failure(task_hp->host, task_hp->port); f.when >= start)
          last += "; through the tunnel: " + f.why;
      return core::make_error(
          core::Errc::unavailable,
          task + " at " + address + " unreachable after " + std::to_string(attempt) +
              " attempts in " +
              std::to_string(
                  std::chrono::duration_cast<std::chrono::milliseconds>(now - start).count()) +
              " ms (" + last + ")");
    }
    std::this_thread::sleep_for(
        std::min<std::chrono::steady_clock::duration>(backoff, deadline - now));
    backoff = std::min(backoff * 2, std::chrono::milliseconds(500));
  }
}

}  // namespace troupe::net
