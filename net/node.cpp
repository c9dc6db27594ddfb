#include "net/node.hpp"

#include <algorithm>

#include "core/expected.hpp"
#include "net/gate.hpp"
#include "net/host_limits.hpp"
#include "net/wire.hpp"

namespace troupe::net {

void configure(caf::actor_system_config& cfg, const NodeOptions& options) {
  // A chief or PS task of hundreds of tasks holds a few descriptors per task: the soft
  // limit (often 1024) is raised to the hard one, which the process may do itself.
  raise_descriptor_limit();
  cfg.load<caf::io::middleman>();
  troupe::net::add_wire_types(cfg);
  cfg.add_error_category(
      error_category, [](uint8_t code, caf::atom_value, const caf::message& ctx) {
        std::string text = std::string("troupe.") + core::errc_name(static_cast<core::Errc>(code));
        if (!ctx.empty() && ctx.match_elements<std::string>())
          text += ": " + ctx.get_as<std::string>(0);
        return text;
      });
  cfg.set("middleman.heartbeat-interval", caf::timespan{options.heartbeat_interval});
  cfg.set("middleman.connection-timeout", caf::timespan{options.connection_timeout});
  set_link_handshake_timeout(options.connection_timeout);
  cfg.set("scheduler.max-threads", options.scheduler_threads);
  cfg.set("scheduler.policy", caf::atom_from_string(options.scheduler_policy));
  // One node's logs must not interleave with the program's JSON line on stdout.
  cfg.set("logger.console", caf::atom("none"));
}

NodeOptions for_job(NodeOptions options, const ClusterSpec& cluster, const std::string& host,
                    unsigned cores) {
  using std::chrono::milliseconds;
  const auto tasks = cluster.tasks();
  const auto spaced = milliseconds(100 * static_cast<int64_t>(tasks.size()) / 32);
  options.heartbeat_interval = std::max(options.heartbeat_interval, spaced);
  options.connection_timeout =
      std::max(options.connection_timeout, 10 * options.heartbeat_interval);
  size_t on_host = 0;
  for (const auto& task : tasks) {
    auto hp = parse_host_port(cluster.address(task));
    if (!host.empty() && hp && hp->host == host) ++on_host;
  }
  const double per_core = static_cast<double>(on_host) / std::max(1u, cores);
  if (per_core <= 4.0) return options;
  const auto grown = milliseconds(static_cast<int64_t>(1000.0 * per_core / 4.0));
  options.connection_timeout =
      std::max(options.connection_timeout, std::min(grown, milliseconds(30000)));
  return options;
}

}  // namespace troupe::net
