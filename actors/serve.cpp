#include "actors/serve.hpp"

#include <iostream>

#include "core/checkpoint/checkpoint_manager.hpp"

#include "actors/channel_server.hpp"
#include "actors/ps_shard.hpp"
#include "actors/worker.hpp"

namespace troupe::actors {

using core::Errc;
using core::make_error;

core::Status serve(const net::ClusterResolver& resolver, const Registry& registry,
                   const net::NodeOptions& options,
                   const std::function<void(const std::string&)>& on_ready) {
  const net::TaskId& task = resolver.task();
  if (task.type != "ps" && task.type != "worker")
    return make_error(Errc::invalid_argument,
                      "serve(): task " + task.to_string() + " is not a ps or worker task");
  auto hp = net::parse_host_port(resolver.cluster_spec().address(task));
  if (!hp) return hp.error();

  caf::actor_system_config cfg;
  net::configure(cfg, options);
  caf::actor_system sys{cfg};
  caf::actor served;
  std::unique_ptr<ChannelServer> channel;
  if (task.type == "ps") {
    PsShardOptions po;
    if (!options.ps_snapshot_dir.empty()) {
      po.snapshot_dir = options.ps_snapshot_dir + "/ps-" + std::to_string(task.index);
      po.snapshot_interval = options.ps_snapshot_interval;
      // A PS restarted after a failure carries on from its newest readable snapshot,
      // before it is published: no peer ever sees it without its variables.
      core::CheckpointManager m(po.snapshot_dir, 2, "ps");
      if (!m.checkpoints().empty()) {
        std::vector<core::Error> skipped;
        auto latest = m.restore_latest(&skipped);
        for (const auto& e : skipped)
          std::cerr << "troupe: skipped a damaged PS snapshot: " << e.message << std::endl;
        if (!latest)
          return make_error(latest.error().code, "task " + task.to_string() +
                                                     ": cannot restore from " + po.snapshot_dir +
                                                     ": " + latest.error().message);
        auto state = PsShardState::from_snapshot(latest->second);
        if (!state)
          return make_error(state.error().code, "task " + task.to_string() + ": " +
                                                    po.snapshot_dir + ": " + state.error().message);
        std::cerr << "troupe: " << task.to_string() << " restored from snapshot " << latest->first
                  << " in " << po.snapshot_dir << " (" << state->counters().updates_applied
                  << " updates)" << std::endl;
        po.initial = std::make_shared<PsShardState>(std::move(*state));
      }
    }
    served = sys.spawn(ps_shard, std::move(po));
    if (options.tensor_channel) {
      auto started = ChannelServer::start(sys, served, hp->host);
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
    WorkerOptions wo;
    wo.index = task.index;
    wo.cluster = resolver.cluster_spec();
    wo.registry = &registry;
    wo.tensor_channel = options.tensor_channel;
    served = sys.spawn(worker, std::move(wo));
  }
  // reuse_addr: a restarted task must re-bind its port at once, not after TIME_WAIT.
  auto port = caf::io::publish(served, hp->port, hp->host.c_str(), /*reuse_addr=*/true);
  if (!port) {
    caf::anon_send_exit(served, caf::exit_reason::user_shutdown);
    return make_error(Errc::unavailable, "task " + task.to_string() + ": cannot publish on " +
                                             resolver.cluster_spec().address(task) + " (" +
                                             sys.render(port.error()) + ")");
  }
  if (on_ready) on_ready(hp->host + ":" + std::to_string(*port));
  // Serve until the actor quits (on shutdown), then end the channel's connections: the
  // actor system's destructor waits for every actor, the channel's scoped ones included.
  {
    caf::scoped_actor self{sys};
    self->monitor(served);
    self->receive([](const caf::down_msg&) {});
  }
  if (channel) channel->stop();
  return {};
}

}  // namespace troupe::actors
