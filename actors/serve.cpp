#include "actors/serve.hpp"

#include <algorithm>
#include <iostream>
#include <mutex>
#include <thread>

#include "core/checkpoint/checkpoint_manager.hpp"

#include "actors/channel_server.hpp"
#include "actors/ps_shard.hpp"
#include "actors/supervisor.hpp"
#include "actors/worker.hpp"
#include "net/auth.hpp"
#include "net/caf_door.hpp"
#include "net/gate.hpp"

namespace troupe::actors {

using core::Errc;
using core::make_error;

namespace {

// CAF's publish() binds every address for a null host.
const char* caf_host(const net::HostPort& at) {
  return at.host == "::" || at.host == "0.0.0.0" ? nullptr : at.host.c_str();
}

// Without the job's cluster secret, CAF itself listens on the task's address. With one it
// listens nowhere: `door` hands it the connections the gate admits (net/caf_door.hpp).
core::Expected<uint16_t> publish_task(caf::actor_system& sys, const caf::actor& a,
                                      const net::HostPort& task, net::CafDoor* door) {
  if (door) {
    door->serve(a);
    return task.port;
  }
  const net::HostPort at{net::bind_host(task.host), task.port};
  // reuse_addr: a restarted task must re-bind its port at once, not after TIME_WAIT.
  auto port = caf::io::publish(a, at.port, caf_host(at), /*reuse_addr=*/true);
  if (!port)
    return make_error(Errc::unavailable, "cannot publish on " +
                                             net::host_port_text(at.host, at.port) + " (" +
                                             sys.render(port.error()) + ")");
  return *port;
}

// The gate on the task's address in front of CAF's `door`; none without a secret (then
// CAF's own port, `caf_port`, is the task's). Returns the port peers dial.
core::Expected<uint16_t> open_gate(const net::HostPort& task, const net::TaskId& id,
                                   const net::ClusterSpec& cluster, const std::string& secret,
                                   net::CafDoor* door, uint16_t caf_port,
                                   std::function<void()> on_refused,
                                   std::unique_ptr<net::CafGate>& gate) {
  if (!door) return caf_port;
  auto g = net::CafGate::open(
      net::bind_host(task.host), task.port, [door] { return door->connect(); }, secret,
      net::GateLimits::for_cluster(cluster), std::move(on_refused), id.to_string());
  if (!g) return g.error();
  gate = std::move(*g);
  return gate->port();
}

// Waits for `served` (which `self` monitors) to go down and gives its exit reason. With a
// `stop`, asks it every 100 ms meanwhile; once it says so, `served` is told to shut down
// (as at a job's end) and `stopped` is set.
caf::error await_down(caf::scoped_actor& self, const caf::actor& served,
                      const std::function<bool()>& stop, bool& stopped) {
  caf::error reason;
  bool down = false;
  auto on_down = [&](const caf::down_msg& dm) {
    reason = dm.reason;
    down = true;
  };
  while (!down) {
    if (!stop || stopped) {
      self->receive(on_down);
      continue;
    }
    self->receive(
        on_down, caf::after(std::chrono::milliseconds(100)) >> [&] {
          if (!stop()) return;
          stopped = true;
          caf::anon_send_exit(served, caf::exit_reason::user_shutdown);
        });
  }
  return reason;
}

core::Error stopped_error(const net::TaskId& task) {
  return make_error(Errc::cancelled,
                    "task " + task.to_string() + ": stopped by its process before the job ended");
}

// A worker task: the worker actor under the node's supervisor. When the actor fails
// (anything but its orderly shutdown), the supervisor starts a fresh one and publishes it
// on the task's port again; the coordinator sees the old one go down, finds the new one on
// the address and brings it up to date like any rejoining worker. Past the supervisor's
// intensity the node gives up: serve() returns the error and the process exits non-zero,
// for the launcher or an orchestrator (the next supervisor up) to restart.
core::Status serve_worker(caf::actor_system& sys, const net::ClusterResolver& resolver,
                          const Registry& registry, const net::NodeOptions& options,
                          const net::HostPort& hp, const std::string& secret,
                          const std::shared_ptr<net::CafDoor>& door,
                          const std::function<void(const std::string&)>& on_ready,
                          const std::function<bool()>& stop, std::unique_ptr<net::CafGate>& gate) {
  const net::TaskId& task = resolver.task();
  WorkerOptions wo;
  wo.cluster_secret = secret;
  wo.index = task.index;
  wo.cluster = resolver.cluster_spec();
  wo.registry = &registry;
  wo.tensor_channel = options.tensor_channel;
  wo.wire_dtype = options.wire_dtype;
  wo.dataset_timeout = options.dataset_timeout;
  struct Published {
    std::mutex mu;
    caf::actor actor;
    uint16_t port = 0;
  };
  auto published = std::make_shared<Published>();
  ChildSpec spec;
  spec.name = task.to_string();
  spec.restart = RestartPolicy::transient;  // its shutdown at the end of the job is final
  spec.start = [wo, published, hp, door](caf::actor_system& s) -> core::Expected<caf::actor> {
    std::lock_guard<std::mutex> lock(published->mu);
    if (published->actor) caf::io::unpublish(published->actor, published->port);
    auto a = s.spawn(worker, wo);
    auto port = publish_task(s, a, hp, door.get());
    if (!port) {
      caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
      return port.error();
    }
    published->actor = a;
    published->port = *port;
    return a;
  };
  SupervisorOptions so;
  so.name = "node supervisor of " + task.to_string();
  so.intensity = options.restart_intensity;
  so.period = options.restart_period;
  so.exit_when_done = true;
  // Detached: starting a child publishes it, a blocking call to the middleman.
  auto sup = sys.spawn<caf::detached>(supervisor, std::vector<ChildSpec>{spec}, so);
  caf::scoped_actor self{sys};
  self->monitor(sup);
  core::Status started;
  self->request(sup, std::chrono::seconds(30), which_atom::value, spec.name)
      .receive([](caf::actor&) {}, [&](caf::error& e) { started = net::from_caf(e); });
  if (started.ok()) {
    uint16_t caf_port = 0;
    {
      std::lock_guard<std::mutex> lock(published->mu);
      caf_port = published->port;
    }
    auto port =
        open_gate(hp, task, resolver.cluster_spec(), secret, door.get(), caf_port, {}, gate);
    if (!port) {
      caf::anon_send_exit(sup, caf::exit_reason::user_shutdown);
      started = make_error(port.error().code, "CAF gate: " + port.error().message);
    } else if (on_ready) {
      on_ready(net::host_port_text(hp.host, *port));
    }
  }
  bool stopped = false;
  const caf::error reason = await_down(self, sup, stop, stopped);
  if (stopped) return stopped_error(task);
  if (reason && reason != caf::exit_reason::normal)
    return make_error(Errc::unavailable,
                      "task " + task.to_string() + ": " + net::from_caf(reason).message);
  if (!started.ok())
    return make_error(started.error().code,
                      "task " + task.to_string() + ": " + started.error().message);
  return {};
}

// The task's actor system lives and ends in here; `gate` (none without a secret) outlives it.
core::Status serve_task(const net::ClusterResolver& resolver, const Registry& registry,
                        const net::NodeOptions& options,
                        const std::function<void(const std::string&)>& on_ready,
                        const std::function<bool()>& stop, std::unique_ptr<net::CafGate>& gate) {
  const net::TaskId& task = resolver.task();
  if (task.type != "ps" && task.type != "worker")
    return make_error(Errc::invalid_argument,
                      "serve(): task " + task.to_string() + " is not a ps or worker task");
  auto hp = net::parse_host_port(resolver.cluster_spec().address(task));
  if (!hp) return hp.error();
  auto secret = net::cluster_secret_from_env();
  if (!secret)
    return make_error(secret.error().code,
                      "task " + task.to_string() + ": " + secret.error().message);

  {
    // A port another process holds is refused now, naming it, as a permanent failure:
    // CAF's publish() would only say that it could not open a socket.
    uint16_t port = hp->port;
    if (auto probe = net::listen_on(net::bind_host(hp->host), port);
        !probe && probe.error().code == Errc::invalid_argument)
      return make_error(Errc::invalid_argument, "task " + task.to_string() + ": its address " +
                                                    resolver.cluster_spec().address(task) + ": " +
                                                    probe.error().message);
  }
  caf::actor_system_config cfg;
  net::configure(cfg, net::for_job(options, resolver.cluster_spec(), hp->host,
                                   std::thread::hardware_concurrency()));
  caf::actor_system sys{cfg};
  // With a secret, CAF listens nowhere: the gate hands it each member through this door.
  auto door = secret->empty() ? nullptr : std::make_shared<net::CafDoor>(sys, hp->port);
  // Before the actor system ends (this runs first, however serve_task returns), the gate
  // stops reaching into it: no more connections, no refusals reported to the PS shard.
  struct Detach {
    std::unique_ptr<net::CafGate>& gate;
    net::CafDoor* door;
    ~Detach() {
      if (gate) gate->forget_caf();
      if (door) door->close();
    }
  } detach{gate, door.get()};
  caf::actor served;
  std::unique_ptr<ChannelServer> channel;
  if (task.type == "ps") {
    PsShardOptions po;
    // The shards, shared by the actor (updates) and the tensor channel's threads (pulls).
    po.shared = std::make_shared<SharedShard>();
    auto shared = po.shared;
    if (!options.ps_snapshot_dir.empty()) {
      po.snapshot_dir = options.ps_snapshot_dir + "/ps-" + std::to_string(task.index);
      po.snapshot_interval = options.ps_snapshot_interval;
      po.snapshot_full_every = options.ps_snapshot_full_every;
      // A PS restarted after a failure carries on from its newest readable snapshot (and
      // the deltas after it), before it is published: no peer ever sees it without its
      // variables.
      std::vector<core::Error> skipped;
      auto restored = restore_ps_snapshots(po.snapshot_dir, &skipped);
      for (const auto& e : skipped)
        std::cerr << "troupe: skipped a damaged PS snapshot: " << e.message << std::endl;
      if (!restored)
        return make_error(restored.error().code,
                          "task " + task.to_string() + ": " + restored.error().message);
      if (*restored) {
        std::cerr << "troupe: " << task.to_string() << " restored from snapshot "
                  << (*restored)->full << " and " << (*restored)->deltas << " deltas in "
                  << po.snapshot_dir << " (" << (*restored)->state->counters().updates_applied
                  << " updates)" << std::endl;
        po.initial = (*restored)->state;
      }
    }
    served = sys.spawn(ps_shard, std::move(po));
    if (options.tensor_channel) {
      auto co = ChannelServerOptions::from_env(*secret);
      if (!co) {
        caf::anon_send_exit(served, caf::exit_reason::user_shutdown);
        return co.error();
      }
      co->identity = task.to_string();  // a worker's handshake must be for this PS task
      // Every worker (and the chief, an evaluator) holds a connection: room for all of them.
      const auto limits = net::GateLimits::for_cluster(resolver.cluster_spec());
      co->max_connections = std::max(co->max_connections, limits.max_connections);
      co->max_unproven = std::max(co->max_unproven, limits.max_unproven);
      // Pooled serving (a few threads, not one per worker) from a job of pooled_from members.
      const auto& tasks = resolver.cluster_spec().tasks();
      co->expected_members = static_cast<size_t>(
          std::count_if(tasks.begin(), tasks.end(), [](const auto& t) { return t.type != "ps"; }));
      auto started =
          ChannelServer::start(sys, served, net::bind_host(hp->host), std::move(*co), shared);
      if (!started) {
        caf::anon_send_exit(served, caf::exit_reason::user_shutdown);
        return make_error(started.error().code, "task " + task.to_string() +
                                                    ": tensor channel: " + started.error().message);
      }
      channel = std::move(*started);
      // Sent before the actor is published, so every peer that asks sees the port.
      caf::anon_send(served, net::channel_atom::value, static_cast<int32_t>(channel->port()));
    }
  } else {
    return serve_worker(sys, resolver, registry, options, *hp, *secret, door, on_ready, stop, gate);
  }
  auto port = publish_task(sys, served, *hp, door.get());
  if (!port) {
    caf::anon_send_exit(served, caf::exit_reason::user_shutdown);
    return make_error(port.error().code, "task " + task.to_string() + ": " + port.error().message);
  }
  auto public_port = open_gate(
      *hp, task, resolver.cluster_spec(), *secret, door.get(), *port,
      [served] { caf::anon_send(served, net::refused_atom::value, true); }, gate);
  if (!public_port) {
    caf::anon_send_exit(served, caf::exit_reason::user_shutdown);
    return make_error(public_port.error().code, "task " + task.to_string() + ": CAF gate on " +
                                                    resolver.cluster_spec().address(task) + ": " +
                                                    public_port.error().message);
  }
  if (on_ready) on_ready(net::host_port_text(hp->host, *public_port));
  // Serve until the actor quits (on shutdown), then end the channel's connections: the
  // actor system's destructor waits for every actor, the channel's scoped ones included.
  caf::error reason;
  bool stopped = false;
  {
    caf::scoped_actor self{sys};
    self->monitor(served);
    reason = await_down(self, served, stop, stopped);
  }
  if (channel) channel->stop();
  if (stopped) return stopped_error(task);
  // A PS shard that failed is not restarted in the process: its state would be lost. The
  // process exits with the error and is restarted whole, restoring its snapshot.
  if (reason && reason != caf::exit_reason::normal && reason != caf::exit_reason::user_shutdown)
    return make_error(Errc::unavailable, "task " + task.to_string() + ": its PS shard failed (" +
                                             sys.render(reason) + ")");
  return {};
}

}  // namespace

core::Status serve(const net::ClusterResolver& resolver, const Registry& registry,
                   const net::NodeOptions& options,
                   const std::function<void(const std::string&)>& on_ready,
                   const std::function<bool()>& stop) {
  // The gate outlives the actor system. A task told to shut down acknowledges, and its
  // process exits right after: CAF, stopping, writes what it still holds (that reply among
  // it) and closes its connections; the gate relays it all until each one ends. Stopped
  // before, it would cut the reply off, and the chief would wait out its timeout. A loaded
  // machine stops CAF slowly: up to 5 s (connections that end sooner end the wait).
  std::unique_ptr<net::CafGate> gate;
  auto status = serve_task(resolver, registry, options, on_ready, stop, gate);
  if (gate) gate->drain(std::chrono::seconds(5));
  return status;
}

}  // namespace troupe::actors
