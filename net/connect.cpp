#include "net/connect.hpp"

#include <algorithm>
#include <thread>

#include <caf/io/all.hpp>

#include "net/cluster_spec.hpp"
#include "net/gate.hpp"

namespace troupe::net {

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
    auto a = sys.middleman().remote_actor(hp->host, hp->port);
    if (a && !is_terminated(*a)) return *a;
    last = a ? std::string("the previous process's connection, not yet dropped")
             : sys.render(a.error());
    const auto now = std::chrono::steady_clock::now();
    // A sign that the process itself runs, not only its kernel (a stopped process's port
    // still accepts TCP connections): through a tunnel, a handshake in which it proved the
    // secret; directly, a connection it closed during CAF's handshake.
    const bool alive = tunnelled ? tunnel_reached(task_hp->host, task_hp->port) >= tried
                                 : (!a && a.error() == caf::sec::disconnect_during_handshake);
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
