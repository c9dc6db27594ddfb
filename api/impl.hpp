#pragma once

// The CAF side of the public API, shared by strategy.cpp and coordinator.cpp.

#include <functional>
#include <map>
#include <memory>
#include <optional>

#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include "actors/coordinator.hpp"
#include "actors/ps_routing.hpp"
#include "net/connect.hpp"
#include "net/node.hpp"
#include "net/wire.hpp"
#include "troupe/coordinator.hpp"
#include "troupe/strategy.hpp"

namespace troupe {

struct ParameterServerStrategy::Impl {
  std::unique_ptr<caf::actor_system_config> cfg;
  std::unique_ptr<caf::actor_system> sys;
  std::optional<caf::scoped_actor> self;
  net::ClusterSpec spec;
  std::shared_ptr<const core::Partitioner> partitioner;
  Options options;
  std::vector<caf::actor> ps;
  std::vector<net::Placement> placements;
  /// Which replica serves each shard now: the coordinator fails over, the chief's reads
  /// follow.
  std::shared_ptr<actors::PsRouting> routing = std::make_shared<actors::PsRouting>();
  int next_ps = 0;  // round-robin start for the next variable

  /// The PS task a shard is read from now (its first live replica); -1: none left.
  int serving(const net::Placement& p) const { return routing->primary(p); }
  /// What must let go of this strategy's actor system before it is destroyed (a Model's
  /// coordinator), by key; run by ~ParameterServerStrategy.
  std::map<const void*, std::function<void()>> before_destroy;

  /// Asks PS task `task` (`msg...`) and waits for its reply of type R. A dead connection, or
  /// a transport error (not the PS's own answer), may mean the task was restarted since
  /// the connection was made: it connects again once and asks again.
  template <class R, class... Ts>
  core::Expected<R> ask_ps(int task, const Ts&... msg) {
    if (task < 0 || task >= static_cast<int>(ps.size()))
      return core::make_error(core::Errc::unavailable, "every replica of the shard is lost");
    caf::actor& handle = ps[static_cast<size_t>(task)];
    for (int attempt = net::is_terminated(handle) ? 1 : 0;; ++attempt) {
      if (attempt == 1) {
        const net::TaskId id{"ps", task};
        auto again = net::connect_with_retry(*sys, spec.address(id), id.to_string(),
                                             options.connect_timeout);
        if (!again) return again.error();
        handle = *again;
      }
      std::optional<R> out;
      core::Status st;
      bool transport = false;
      (*self)
          ->request(handle, options.request_timeout, msg...)
          .receive([&](R& r) { out = std::move(r); },
                   [&](caf::error& e) {
                     st = net::from_caf(e);
                     transport = e.category() != net::error_category;
                   });
      if (out) return std::move(*out);
      if (!transport || attempt > 0) return st.error();
    }
  }
};

struct ClusterCoordinator::Impl {
  ParameterServerStrategy& strategy;
  Options options;
  std::shared_ptr<actors::ClosureBook> book;
  caf::actor coordinator;
  std::vector<std::string> worker_addresses;  // as the cluster spec gives them
};

}  // namespace troupe
