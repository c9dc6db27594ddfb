#include "net/node.hpp"

#include "core/expected.hpp"
#include "net/wire.hpp"

namespace troupe::net {

void configure(caf::actor_system_config& cfg, const NodeOptions& options) {
  cfg.load<caf::io::middleman>();
  cfg.add_message_types<caf::id_block::troupe>();
  cfg.add_error_category(
      error_category, [](uint8_t code, caf::atom_value, const caf::message& ctx) {
        std::string text = std::string("troupe.") + core::errc_name(static_cast<core::Errc>(code));
        if (!ctx.empty() && ctx.match_elements<std::string>())
          text += ": " + ctx.get_as<std::string>(0);
        return text;
      });
  cfg.set("middleman.heartbeat-interval", caf::timespan{options.heartbeat_interval});
  cfg.set("middleman.connection-timeout", caf::timespan{options.connection_timeout});
  cfg.set("scheduler.max-threads", options.scheduler_threads);
  cfg.set("scheduler.policy", caf::atom_from_string(options.scheduler_policy));
  // One node's logs must not interleave with the program's JSON line on stdout.
  cfg.set("logger.console", caf::atom("none"));
}

}  // namespace troupe::net
