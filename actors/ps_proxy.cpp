// The chief's stand-in for one PS task: its health and its recovery. States are behaviours:
//
//   serving (its counts polled every rejoin interval) -> restoring (down: its address is
//   tried every rejoin interval until it answers again, restored from its snapshot or
//   merely reconnected) -> serving ... or -> failed (not back by the deadline, or back
//   without its variables).
//   With replicated shards, a task the coordinator failed over: -> replaced (its address
//   tried every rejoin interval) -> rejoining (a process answers there; the coordinator
//   gives it copies of its shards) -> serving, or -> replaced again if lost meanwhile.
//
// The coordinator pauses dispatch while it is down (ps_down .. ps_up) and ends the job
// when it fails (ps_failed). The counters it keeps (restores, reconnects, updates lost,
// snapshot figures) go straight to the ClosureBook.
#include <iostream>

#include "actors/chief_protocol.hpp"

namespace troupe::actors {
namespace {

using Clock = std::chrono::steady_clock;

struct PsProxyState {
  uint64_t index = 0;
  Endpoint task;
  caf::actor coordinator;
  std::shared_ptr<ClosureBook> book;
  CoordinatorConfig config;
  std::shared_ptr<const PsRouting> routing;  // the chief's
  bool replicated = false;                   // shards have backups: watch it regardless
  enum class Mode { serving, restoring, failed, replaced, rejoining } mode = Mode::serving;
  /// Counts the times it went down; a reply or timer of an earlier episode is dropped.
  uint64_t episode = 0;
  int64_t process = 0;            // its process incarnation (PsStats::process); 0: not known yet
  int64_t last_updates = 0;       // its updates_applied, as last polled
  int64_t snapshot_failures = 0;  // as last polled
  Clock::time_point last_warning;
  static inline const char* name = "troupe.ps_proxy";
};

using Self = caf::stateful_actor<PsProxyState>;
using Mode = PsProxyState::Mode;

caf::behavior serving(Self* self);
caf::behavior restoring(Self* self);
caf::behavior failed(Self* self);
caf::behavior replaced(Self* self);
caf::behavior rejoining(Self* self);

/// `f`, run only while the episode it was made in is the current one.
template <class... Ts, class F>
auto current(Self* self, F f) {
  return while_unchanged<Ts...>(self->state.episode, std::move(f));
}

std::string task_name(Self* self) {
  return "ps:" + std::to_string(self->state.index);
}

template <class Atom>
void schedule(Self* self, Atom what, std::chrono::milliseconds after) {
  self->delayed_send(self, after, what, self->state.episode);
}

// Each poll brings its update count (so that a restore can tell how many updates it lost),
// its process incarnation (a restart changes it), and its snapshot figures, which reach
// the stats and, while snapshots fail, a warning at most every 10 s.
void poll(Self* self) {
  auto& st = self->state;
  if (st.replicated)
    self->send(st.task.handle, net::lease_atom::value,
               static_cast<int64_t>(st.config.ps_lease.count()));
  self->request(st.task.handle, st.config.rejoin_interval, net::stats_atom::value)
      .then(current<std::vector<int64_t>&>(
                self,
                [=](std::vector<int64_t>& v) {
                  auto& s = self->state;
                  const auto stats = net::PsStats::from(v);
                  s.last_updates = std::max(s.last_updates, stats.updates_applied);
                  if (s.process == 0) s.process = stats.process;
                  s.book->ps_snapshots(s.index, stats.snapshot_failures, stats.snapshot_age_ms);
                  const auto now = Clock::now();
                  if (stats.snapshot_failures > s.snapshot_failures &&
                      now - s.last_warning > std::chrono::seconds(10)) {
                    s.last_warning = now;
                    std::cerr << "troupe: warning: " << task_name(self)
                              << " fails to write snapshots (" << stats.snapshot_failures
                              << " failures; newest snapshot "
                              << (stats.snapshot_age_ms < 0
                                      ? std::string("never written")
                                      : std::to_string(stats.snapshot_age_ms) + " ms old")
                              << "): a restart would lose its updates since" << std::endl;
                  }
                  s.snapshot_failures = stats.snapshot_failures;
                }),
            [](caf::error&) {});
}

void fail(Self* self, const core::Error& e) {
  ++self->state.episode;  // what was under way is dropped
  self->send(self->state.coordinator, chief::ps_failed_atom::value, self->state.index,
             net::to_caf(e));
  self->state.mode = Mode::failed;
  self->become(failed(self));
}

// The routing has a new epoch. A task lost is waited for no longer as a restore (its
// shards are served by their copies): its address is tried every rejoin interval, and
// when a process answers there it rejoins as a replica (the coordinator gives it copies of
// its shards while training goes on). A task that serves again is watched as before. A
// live task raises its own epoch to the new one, so that a worker still routing by the
// old one is refused there too.
void try_rejoin_as_replica(Self* self);

void failover(Self* self, bool live) {
  auto& st = self->state;
  const auto index = static_cast<int32_t>(st.index);
  if (st.routing->is_lost(index)) {
    if (st.mode == Mode::replaced) return;
    ++st.episode;  // its rejoin and deadline timers are dropped
    st.mode = Mode::replaced;
    self->become(replaced(self));
    schedule(self, chief::rejoin_atom::value, st.config.rejoin_interval);
    return;
  }
  if (st.mode == Mode::rejoining && !st.routing->is_joining(index)) {
    st.mode = Mode::serving;  // rejoined: its copies are whole
    self->become(serving(self));
  }
  if (live && st.mode != Mode::restoring && st.routing->epoch() > 0)
    self->send(st.task.handle, net::failover_atom::value, st.routing->epoch(), st.routing->lost(),
               st.routing->joining());
}

void try_rejoin_as_replica(Self* self) {
  auto retry = current<>(
      self, [=] { schedule(self, chief::rejoin_atom::value, self->state.config.rejoin_interval); });
  reach_task(self, self->state.task, std::chrono::seconds(2),
             current<caf::actor>(
                 self,
                 [=](caf::actor found) {
                   auto& st = self->state;
                   st.task.handle = std::move(found);
                   self->request(st.task.handle, std::chrono::seconds(2), net::stats_atom::value)
                       .then(current<std::vector<int64_t>&>(
                                 self,
                                 [=](std::vector<int64_t>& v) {
                                   auto& s = self->state;
                                   s.process = net::PsStats::from(v).process;
                                   ++s.episode;
                                   s.mode = Mode::rejoining;
                                   self->monitor(s.task.handle);
                                   self->become(rejoining(self));
                                   self->send(s.coordinator, chief::ps_join_atom::value, s.index,
                                              s.task.handle);
                                 }),
                             [=](caf::error&) { retry(); });
                 }),
             retry);
}

void back(Self* self) {
  self->send(self->state.coordinator, chief::ps_up_atom::value, self->state.index);
  self->state.mode = Mode::serving;
  self->become(serving(self));
  failover(self, /*live=*/true);
}

// It went down: look for it on its address until the deadline.
void go_down(Self* self) {
  auto& st = self->state;
  ++st.episode;
  self->send(st.coordinator, chief::ps_down_atom::value, st.index);
  schedule(self, chief::rejoin_atom::value, st.config.rejoin_interval);
  schedule(self, chief::deadline_atom::value, st.config.ps_restore_deadline);
  st.mode = Mode::restoring;
  self->become(restoring(self));
}

// It answers on its address again. A restarted one restored itself from its snapshot
// before publishing (serve() does), so its stats say from which update count; one whose
// connection merely dropped (a stall, a cut link) answers with the same process
// incarnation and has lost nothing.
void returned(Self* self, const net::PsStats& ps) {
  auto& st = self->state;
  if (st.process != 0 && ps.process == st.process) {
    st.last_updates = std::max(st.last_updates, ps.updates_applied);
    st.book->ps_reconnected();
    return back(self);
  }
  if (ps.restored_from < 0) {
    return fail(self,
                core::make_error(core::Errc::data_loss,
                                 task_name(self) + " came back without a snapshot to restore; its "
                                                   "variables are lost"));
  }
  st.process = ps.process;
  st.book->ps_restored(std::max<int64_t>(0, st.last_updates - ps.restored_from));
  st.last_updates = ps.updates_applied;
  back(self);
}

void try_rejoin(Self* self) {
  auto retry = current<>(
      self, [=] { schedule(self, chief::rejoin_atom::value, self->state.config.rejoin_interval); });
  reach_task(
      self, self->state.task, std::chrono::seconds(2),
      current<caf::actor>(
          self,
          [=](caf::actor found) {
            self->state.task.handle = std::move(found);
            self->monitor(self->state.task.handle);
            // Briefly: right after a stall, the peer may still route
            // this connection's messages to the one it has not yet
            // noticed is gone; the next try gets through.
            self->request(self->state.task.handle, std::chrono::seconds(2), net::stats_atom::value)
                .then(current<std::vector<int64_t>&>(
                          self,
                          [=](std::vector<int64_t>& v) { returned(self, net::PsStats::from(v)); }),
                      [=](caf::error&) { retry(); });
          }),
      retry);
}

caf::behavior serving(Self* self) {
  return {
      [=](chief::tick_atom) {
        poll(self);
        self->delayed_send(self, self->state.config.rejoin_interval, chief::tick_atom::value);
      },
      [=](chief::task_down_atom, uint64_t episode) {
        const auto& s = self->state;
        if (episode == s.episode && (s.config.ps_recovery || s.replicated)) go_down(self);
      },
      [=](net::failover_atom) { failover(self, /*live=*/true); },
      [=](net::shutdown_atom) { return shut_down_reply(self, self->state.task, /*live=*/true); },
      [=](chief::rejoin_atom, uint64_t) {},
      [=](chief::deadline_atom, uint64_t) {},
  };
}

caf::behavior restoring(Self* self) {
  return {
      [=](chief::tick_atom) {
        self->delayed_send(self, self->state.config.rejoin_interval, chief::tick_atom::value);
      },
      [=](chief::task_down_atom, uint64_t) {},
      [=](net::failover_atom) { failover(self, /*live=*/false); },
      [=](net::shutdown_atom) { return shut_down_reply(self, self->state.task, /*live=*/false); },
      [=](chief::rejoin_atom, uint64_t episode) {
        if (episode == self->state.episode) try_rejoin(self);
      },
      [=](chief::deadline_atom, uint64_t episode) {
        if (episode != self->state.episode) return;
        fail(self, core::make_error(
                       core::Errc::unavailable,
                       task_name(self) + " did not come back within " +
                           std::to_string(self->state.config.ps_restore_deadline.count()) + " ms"));
      },
  };
}

caf::behavior failed(Self* self) {
  return {
      [=](chief::tick_atom) {},
      [=](chief::task_down_atom, uint64_t) {},
      [=](net::failover_atom) {},
      [=](net::shutdown_atom) { return shut_down_reply(self, self->state.task, /*live=*/false); },
      [=](chief::rejoin_atom, uint64_t) {},
      [=](chief::deadline_atom, uint64_t) {},
  };
}

// Failed over: its shards are served by their copies; its address is tried until a
// process answers there, which then rejoins. At the end of the job it is still told to
// shut down (it may be alive behind a cut link), reached afresh.
caf::behavior replaced(Self* self) {
  return {
      [=](chief::tick_atom) {  // kept going: polls resume once it serves again
        self->delayed_send(self, self->state.config.rejoin_interval, chief::tick_atom::value);
      },
      [=](chief::task_down_atom, uint64_t) {},
      [=](net::failover_atom) {},
      [=](net::shutdown_atom) { return shut_down_reply(self, self->state.task, /*live=*/false); },
      [=](chief::rejoin_atom, uint64_t episode) {
        if (episode == self->state.episode) try_rejoin_as_replica(self);
      },
      [=](chief::deadline_atom, uint64_t) {},
  };
}

// Answering again and being given copies of its shards (the coordinator's rebuild). Lost
// again meanwhile: the coordinator fails it over again, and it is replaced once more.
caf::behavior rejoining(Self* self) {
  return {
      [=](chief::tick_atom) {
        // Its lease (lapsed, if the same process is back behind a healed link) is renewed
        // so that it takes the updates it keeps.
        self->send(self->state.task.handle, net::lease_atom::value,
                   static_cast<int64_t>(self->state.config.ps_lease.count()));
        self->delayed_send(self, self->state.config.rejoin_interval, chief::tick_atom::value);
      },
      [=](chief::task_down_atom, uint64_t episode) {
        auto& st = self->state;
        if (episode != st.episode) return;
        self->send(st.coordinator, chief::ps_down_atom::value, st.index);
        if (!st.routing->is_joining(static_cast<int32_t>(st.index))) {
          // Gone before its rebuild began: it is still lost; look for it again.
          ++st.episode;
          st.mode = Mode::replaced;
          self->become(replaced(self));
          schedule(self, chief::rejoin_atom::value, st.config.rejoin_interval);
        }
      },
      [=](net::failover_atom) { failover(self, /*live=*/true); },
      [=](net::shutdown_atom) { return shut_down_reply(self, self->state.task, /*live=*/true); },
      [=](chief::rejoin_atom, uint64_t) {},
      [=](chief::deadline_atom, uint64_t) {},
  };
}

caf::behavior ps_proxy(Self* self, caf::actor coordinator, uint64_t index, Endpoint task,
                       std::shared_ptr<const PsRouting> routing, bool replicated,
                       std::shared_ptr<ClosureBook> book, CoordinatorConfig config) {
  auto& st = self->state;
  st.index = index;
  st.task = std::move(task);
  st.coordinator = std::move(coordinator);
  st.book = std::move(book);
  st.config = std::move(config);
  st.routing = std::move(routing);
  st.replicated = replicated;
  if (st.config.ps_recovery || st.replicated) watch_task(self, st.task, st.episode);
  self->send(self, chief::tick_atom::value);
  return serving(self);
}

}  // namespace

caf::actor spawn_ps_proxy(caf::event_based_actor* coordinator, size_t index, Endpoint task,
                          std::shared_ptr<const PsRouting> routing, bool replicated,
                          std::shared_ptr<ClosureBook> book, const CoordinatorConfig& config) {
  return coordinator->spawn<caf::linked>(ps_proxy, caf::actor_cast<caf::actor>(coordinator),
                                         static_cast<uint64_t>(index), std::move(task),
                                         std::move(routing), replicated, std::move(book), config);
}

}  // namespace troupe::actors
