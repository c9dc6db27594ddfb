// The coordinator's PS half: a PS task going down, being waited for, coming back restored
// from its snapshot or merely reconnected, and the periodic poll of every PS's counts.
#include <iostream>

#include <caf/io/all.hpp>

#include "actors/coordinator_steps.hpp"
#include "net/connect.hpp"
#include "net/gate.hpp"

namespace troupe::actors::coordinator_steps {

bool any_ps_restoring(const CoordinatorState& st) {
  return std::any_of(st.ps.begin(), st.ps.end(), [](const auto& p) { return p.restoring; });
}

// A step failed with `unavailable` (a PS it needed did not answer). With PS recovery on,
// that is a PS going down or coming back, so the closure runs again once it is restored,
// unless a PS has already failed for good, or no PS goes down after 50 such errors in a
// row (then the error is the step's own).
bool retry_unavailable(Self* self) {
  auto& st = self->state;
  if (!st.config.ps_recovery) return false;
  if (std::any_of(st.ps.begin(), st.ps.end(), [](const auto& p) { return p.failed; })) return false;
  if (any_ps_restoring(st)) return true;
  return ++st.unavailable_streak <= 50;
}

void schedule_ps_rejoin(Self* self, size_t t) {
  self->delayed_send(self, self->state.config.rejoin_interval, ps_rejoin_atom::value,
                     static_cast<uint64_t>(t));
}

void ps_down(Self* self, size_t t) {
  auto& p = self->state.ps[t];
  if (p.restoring || !self->state.config.ps_recovery) return;
  p.restoring = true;
  p.failed = false;
  ++p.generation;
  schedule_ps_rejoin(self, t);
  self->delayed_send(self, self->state.config.ps_restore_deadline, ps_deadline_atom::value,
                     static_cast<uint64_t>(t), p.generation);
}

// A PS task answers on its address again. A restarted one restored itself from its
// snapshot before publishing (serve() does), so its stats say from which update count; one
// whose connection merely dropped (a stall, a cut link) answers with the same process
// incarnation and has lost nothing.
void try_ps_rejoin(Self* self, size_t t) {
  auto& p = self->state.ps[t];
  if (!p.restoring) return;
  const uint64_t generation = p.generation;
  auto retry = [=] {
    if (self->state.ps[t].restoring && self->state.ps[t].generation == generation)
      schedule_ps_rejoin(self, t);
  };
  auto route = net::caf_route(p.host, p.port);  // through the tunnel, with a secret
  if (!route) return retry();
  auto mm = self->system().middleman().actor_handle();
  self->request(mm, std::chrono::seconds(2), caf::connect_atom::value, route->host, route->port)
      .then(
          [=](caf::node_id&, caf::strong_actor_ptr& ptr, std::set<std::string>&) {
            auto& q = self->state.ps[t];
            if (!q.restoring || q.generation != generation) return;
            if (!ptr || net::is_terminated(caf::actor_cast<caf::actor>(ptr))) return retry();
            q.handle = caf::actor_cast<caf::actor>(ptr);
            self->monitor(q.handle);
            // Briefly: right after a stall, the peer may still route this connection's
            // messages to the one it has not yet noticed is gone; the next try gets through.
            self->request(q.handle, std::chrono::seconds(2), net::stats_atom::value)
                .then(
                    [=](std::vector<int64_t>& stats) {
                      auto& r = self->state.ps[t];
                      if (!r.restoring || r.generation != generation) return;
                      const auto ps = net::PsStats::from(stats);
                      r.restoring = false;
                      self->state.unavailable_streak = 0;
                      if (r.process != 0 && ps.process == r.process) {
                        // The same process: the connection dropped, nothing was lost.
                        r.last_updates = std::max(r.last_updates, ps.updates_applied);
                        self->state.book->ps_reconnected();
                        dispatch(self);
                        return;
                      }
                      const std::string task = "ps:" + std::to_string(t);
                      if (ps.restored_from < 0) {
                        // Back, but empty: its variables are gone.
                        r.failed = true;
                        const auto e = core::make_error(
                            core::Errc::data_loss,
                            task +
                                " came back without a snapshot to restore; its variables "
                                "are lost");
                        self->state.book->abort(e);
                        cancel_all(self, e);
                        dispatch(self);
                        return;
                      }
                      r.process = ps.process;
                      self->state.book->ps_restored(
                          std::max<int64_t>(0, r.last_updates - ps.restored_from));
                      r.last_updates = ps.updates_applied;
                      dispatch(self);
                    },
                    [=](caf::error&) { retry(); });
          },
          [=](caf::error&) { retry(); });
}

// Each PS task's counts: its update count (so that a restore can tell how many updates
// it lost), its process incarnation (a restart changes it), and its snapshot figures,
// which reach the stats and, while snapshots fail, a warning every 10 s.
void poll_ps(Self* self) {
  for (size_t t = 0; t < self->state.ps.size(); ++t) {
    const auto& p = self->state.ps[t];
    if (p.restoring || p.failed) continue;
    const uint64_t generation = p.generation;
    self->request(p.handle, self->state.config.rejoin_interval, net::stats_atom::value)
        .then(
            [=](std::vector<int64_t>& v) {
              auto& q = self->state.ps[t];
              if (q.generation != generation || q.restoring) return;
              const auto stats = net::PsStats::from(v);
              q.last_updates = std::max(q.last_updates, stats.updates_applied);
              if (q.process == 0) q.process = stats.process;
              self->state.book->ps_snapshots(t, stats.snapshot_failures, stats.snapshot_age_ms);
              const auto now = CoordinatorState::Clock::now();
              if (stats.snapshot_failures > q.snapshot_failures &&
                  now - self->state.last_snapshot_warning > std::chrono::seconds(10)) {
                self->state.last_snapshot_warning = now;
                std::cerr << "troupe: warning: ps:" << t << " fails to write snapshots ("
                          << stats.snapshot_failures << " failures; newest snapshot "
                          << (stats.snapshot_age_ms < 0
                                  ? std::string("never written")
                                  : std::to_string(stats.snapshot_age_ms) + " ms old")
                          << "): a restart would lose its updates since" << std::endl;
              }
              q.snapshot_failures = stats.snapshot_failures;
            },
            [](caf::error&) {});
  }
  self->delayed_send(self, self->state.config.rejoin_interval, poll_atom::value);
}

}  // namespace troupe::actors::coordinator_steps
