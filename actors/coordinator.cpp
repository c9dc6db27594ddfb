// The coordinator: what runs where. It keeps the closure queue and, per worker, the
// closures handed to that worker's proxy and not yet accounted for (done, failed, handed
// back); the proxies own the connections. Every closure handed to a proxy comes back
// exactly once as one of those messages, so `out` is what the dispatch policy and the
// watchdog see of each worker.
#include "actors/coordinator.hpp"

#include <algorithm>
#include <deque>
#include <iostream>

#include "actors/chief_protocol.hpp"
#include "core/runtime/registry.hpp"
#include "net/connect.hpp"

namespace troupe::actors {
namespace {

using Clock = std::chrono::steady_clock;

struct CoordinatorState {
  struct Sent {
    uint64_t id;
    std::string step;
    Clock::time_point at;
  };
  struct WorkerView {
    caf::actor proxy;
    bool alive = true;   // not lost (it may still be being brought up to date)
    bool ready = false;  // takes closures
    std::vector<Sent> out;
  };
  struct PsView {
    caf::actor proxy;
    bool down = false;    // being waited for
    bool failed = false;  // gone for good
  };
  std::vector<WorkerView> workers;
  std::vector<PsView> ps;
  std::deque<net::ClosureMsg> queue;
  /// Closures whose worker was lost while running them, by id: one that takes down
  /// `max_closure_losses` workers fails instead of crash-looping the job.
  std::map<uint64_t, int> losses;
  /// The last cancel_all's mark and reason: a closure scheduled before it whose message
  /// comes after it (the user's thread raced the error) is cancelled as it arrives.
  uint64_t cancelled_through = 0;
  core::Error cancelled_why;
  int unavailable_streak = 0;           // `unavailable` step errors in a row with no PS known down
  Clock::time_point unavailable_since;  // the first error of the streak
  bool paused = false;                  // dispatch waits a rejoin interval after such an error
  size_t last_dispatched = 0;
  std::shared_ptr<ClosureBook> book;
  CoordinatorConfig config;
  std::vector<net::Placement> placements;
  std::shared_ptr<PsRouting> routing;     // shared with the strategy's reads
  int replicas = 1;                       // of every shard, as placed
  std::vector<std::string> ps_addresses;  // "host:port" of each PS task
  /// Failed-over tasks being given copies of their shards, by the round of their rebuild:
  /// a rebuild's answer of an earlier round (the task was lost again meanwhile) is dropped.
  std::map<uint64_t, uint64_t> rebuilding;
  uint64_t rebuild_rounds = 0;
  Clock::time_point last_progress;  // a closure finished, or work arrived with none pending
  Clock::time_point last_report;    // the watchdog's, since last_progress
  static inline const char* name = "troupe.coordinator";
};

using Self = caf::stateful_actor<CoordinatorState>;

bool any_ps_down(const CoordinatorState& st) {
  return std::any_of(st.ps.begin(), st.ps.end(), [](const auto& p) { return p.down; });
}

bool anything_pending(const CoordinatorState& st) {
  if (!st.queue.empty()) return true;
  return std::any_of(st.workers.begin(), st.workers.end(),
                     [](const auto& w) { return !w.out.empty(); });
}

// The closure is accounted for: it is no longer out at worker w.
void forget(Self* self, uint64_t w, uint64_t id) {
  auto& out = self->state.workers[w].out;
  auto it = std::find_if(out.begin(), out.end(), [&](const auto& s) { return s.id == id; });
  if (it != out.end()) out.erase(it);
}

void send_closure(Self* self, size_t w) {
  auto& st = self->state;
  net::ClosureMsg c = std::move(st.queue.front());
  st.queue.pop_front();
  c.settled_below = st.book->settled_below();
  st.workers[w].out.push_back({c.id, c.step, Clock::now()});
  self->send(st.workers[w].proxy, net::run_atom::value, std::move(c));
}

// Sends queued closures to workers that can take them; nothing while a PS is down.
void dispatch(Self* self) {
  auto& st = self->state;
  if (st.paused || any_ps_down(st)) return;
  std::vector<WorkerLoad> loads(st.workers.size());
  for (size_t w = 0; w < st.workers.size(); ++w) {
    const auto& v = st.workers[w];
    loads[w] = {v.alive, v.alive && v.ready, v.out.size()};
  }
  while (!st.queue.empty()) {
    const size_t best = pick_worker(loads, st.last_dispatched, st.config.max_in_flight_per_worker);
    if (best == loads.size()) return;  // every worker is busy or missing
    st.last_dispatched = best;
    ++loads[best].in_flight;
    send_closure(self, best);
  }
}

// The first error ends the work: queued closures are cancelled, and so are those in
// flight: their RemoteValues report `cancelled` now, and each proxy with closures out
// tells its worker, so that a closure waiting in its mailbox is dropped unrun and a
// running step sees StepContext::cancelled() and its PS requests fail. join() returns.
void cancel_all(Self* self, const core::Error& why) {
  auto& st = self->state;
  for (const auto& c : st.queue)
    st.book->cancel(c.id, why);
  st.queue.clear();
  const uint64_t through = st.book->error_through();
  st.cancelled_through = through;
  st.cancelled_why = why;
  for (auto& v : st.workers) {
    if (v.out.empty()) continue;
    for (const auto& s : v.out)
      st.book->cancel(s.id, why);
    self->send(v.proxy, net::cancel_atom::value, through);
  }
}

// Closures handed back go to the front of the queue, oldest first, unless settled
// meanwhile (a cancelled closure must not run again).
void requeue(Self* self, std::vector<net::ClosureMsg>& closures, size_t from, bool count) {
  auto& st = self->state;
  for (size_t i = closures.size(); i-- > from;) {
    if (!st.book->pending(closures[i].id)) continue;
    st.queue.push_front(std::move(closures[i]));
    if (count) st.book->retried();
  }
}

// Worker w is lost with `held`, in the order sent. The first was running: it counts a
// loss against that closure, and one that has taken down max_closure_losses workers fails
// (internal, not unavailable: restarting the job would crash its workers again).
void worker_lost(Self* self, uint64_t w, std::vector<net::ClosureMsg>& held) {
  auto& st = self->state;
  auto& v = st.workers[w];
  v.alive = false;
  v.ready = false;
  v.out.clear();
  st.book->worker_lost(w);
  std::optional<core::Error> poison;
  if (!held.empty() && st.book->pending(held.front().id)) {
    const net::ClosureMsg& running = held.front();
    const int lost = ++st.losses[running.id];
    if (st.config.max_closure_losses > 0 && lost >= st.config.max_closure_losses) {
      poison = core::make_error(core::Errc::internal,
                                "closure " + std::to_string(running.id) + " (step '" +
                                    running.step + "') lost its worker " + std::to_string(lost) +
                                    " times; the last was worker:" + std::to_string(w));
      st.book->fail(running.id, *poison);
      st.losses.erase(running.id);
    }
  }
  requeue(self, held, poison ? 1 : 0, /*count=*/true);
  if (poison) cancel_all(self, *poison);
}

// With PS recovery on, a step's `unavailable` error is a PS going down or coming back, so
// the closure runs again once it is restored, unless a PS has already failed for good, or
// no PS goes down after 50 such errors in a row (then the error is the step's own). With
// replicated shards the errors may also come before the chief sees a PS go down: a task
// cut off from the chief refuses workers once its lease lapses, which is before the
// heartbeat timeout tells the chief; such a streak is retried for up to
// ps_restore_deadline, as long as a restore would be waited for.
bool retry_unavailable(Self* self) {
  auto& st = self->state;
  if (!st.config.ps_recovery && st.replicas < 2) return false;
  if (std::any_of(st.ps.begin(), st.ps.end(), [](const auto& p) { return p.failed; })) return false;
  // A PS down, or a replica rejoining (workers reconnect to it as it comes back).
  if (any_ps_down(st) || !st.rebuilding.empty()) return true;
  const auto now = Clock::now();
  if (st.unavailable_streak++ == 0) st.unavailable_since = now;
  if (st.replicas > 1) return now - st.unavailable_since < st.config.ps_restore_deadline;
  return st.unavailable_streak <= 50;
}

void step_failed(Self* self, net::ClosureMsg& c, const caf::error& err) {
  auto& st = self->state;
  if (!st.book->pending(c.id)) return;  // cancelled meanwhile
  const core::Error e = net::from_caf(err);
  if (e.code == core::Errc::unavailable && retry_unavailable(self)) {
    // Run it again once the PS is back; its pushes that did land are ignored then.
    st.queue.push_front(std::move(c));
    st.book->retried();
    if (!any_ps_down(st) && !st.paused) {
      st.paused = true;
      self->delayed_send(self, st.config.rejoin_interval, chief::resume_atom::value);
    }
    return;
  }
  st.losses.erase(c.id);
  st.last_progress = Clock::now();
  st.book->fail(c.id, e);
  cancel_all(self, e);
}

// Every PS task and worker learns the routing's new epoch (through its proxy).
void announce(Self* self) {
  self->state.unavailable_streak = 0;  // errors from before the change are explained by it
  for (const auto& p : self->state.ps)
    self->send(p.proxy, net::failover_atom::value);
  for (const auto& v : self->state.workers)
    self->send(v.proxy, net::failover_atom::value);
}

// One shard copy of a rebuild: where from, and its key.
struct CopyJob {
  std::string key;
  std::string source;  // "host:port" of the task serving the shard now
  std::string source_name;
};

// The copies of a rejoining task's shards, on a thread of its own (its requests wait for
// each other): each shard read whole from the task serving it, fenced at `epoch` (no update
// routed without the rejoining task lands there after the copy), then installed on the
// rejoining task, which applies what it kept meanwhile. Answers (rebuilt, t, round, shards)
// or (rebuilt, t, round, error).
void rebuild_copies(caf::blocking_actor* self, caf::actor coordinator, uint64_t t, uint64_t round,
                    caf::actor task, std::vector<CopyJob> jobs, uint64_t epoch,
                    std::chrono::milliseconds timeout) {
  std::map<std::string, caf::actor> sources;
  auto fail = [&](const core::Error& e) {
    self->send(coordinator, chief::rebuilt_atom::value, t, round, net::to_caf(e));
  };
  for (const auto& job : jobs) {
    auto& source = sources[job.source];
    if (!source) {
      auto a = net::connect_with_retry(self->system(), job.source, job.source_name, timeout);
      if (!a) return fail(a.error());
      source = *a;
    }
    std::optional<net::ShardCopy> copy;
    core::Status st;
    self->request(source, timeout, net::shard_copy_atom::value, job.key, epoch)
        .receive([&](net::ShardCopy& c) { copy = std::move(c); },
                 [&](caf::error& e) { st = net::from_caf(e); });
    if (!copy)
      return fail(core::make_error(
          st.error().code,
          "copying '" + job.key + "' from " + job.source_name + ": " + st.error().message));
    self->request(task, timeout, net::install_atom::value, job.key, std::move(*copy))
        .receive([](caf::ok_atom) {}, [&](caf::error& e) { st = net::from_caf(e); });
    if (!st)
      return fail(core::make_error(
          st.error().code,
          "installing '" + job.key + "' on ps:" + std::to_string(t) + ": " + st.error().message));
  }
  self->send(coordinator, chief::rebuilt_atom::value, t, round, static_cast<int64_t>(jobs.size()));
}

// A rebuild ended without its copies: the task is lost again (a new epoch), and its proxy
// tries its address again.
void rebuild_failed(Self* self, uint64_t t, const core::Error& e) {
  auto& st = self->state;
  st.rebuilding.erase(t);
  std::cerr << "troupe: ps:" << t << " could not rejoin: " << e.to_string() << std::endl;
  if (st.routing->fail_over(static_cast<int32_t>(t), st.placements)) announce(self);
}

// Failed-over PS task t answers again (restarted, or back behind a healed link): it rejoins
// as a replica of its shards while training goes on. It makes them afresh and keeps the
// updates it is sent; a new epoch sends it every update; then each shard is copied from
// the task serving it and installed (rebuild_copies); a last epoch has it serve again.
void start_rebuild(Self* self, uint64_t t, caf::actor task) {
  auto& st = self->state;
  if (st.rebuilding.count(t) != 0 || !st.routing->is_lost(static_cast<int32_t>(t))) return;
  const uint64_t round = ++st.rebuild_rounds;
  st.rebuilding[t] = round;
  std::vector<net::VariableDef> defs;
  for (const auto& p : st.placements) {
    const bool holds =
        p.ps_task == static_cast<int32_t>(t) ||
        std::find(p.backups.begin(), p.backups.end(), static_cast<int32_t>(t)) != p.backups.end();
    if (holds) defs.push_back(p.def);
  }
  const auto timeout = std::max(st.config.closure_timeout, std::chrono::milliseconds(10000));
  self->request(task, timeout, net::rejoin_shards_atom::value, defs)
      .then(
          [=](caf::ok_atom) {
            auto& s = self->state;
            auto it = s.rebuilding.find(t);
            if (it == s.rebuilding.end() || it->second != round) return;
            if (!s.routing->begin_rejoin(static_cast<int32_t>(t)))
              return rebuild_failed(self, t, core::make_error(core::Errc::internal, "not lost"));
            announce(self);
            std::vector<CopyJob> jobs;
            for (const auto& p : s.placements) {
              const auto live = s.routing->live(p);
              if (std::find(live.begin(), live.end(), static_cast<int32_t>(t)) == live.end())
                continue;
              const int32_t from = s.routing->primary(p);
              if (from < 0) continue;  // no copy serves it: nothing to catch up from
              jobs.push_back({net::shard_key(p.def), s.ps_addresses.at(static_cast<size_t>(from)),
                              "ps:" + std::to_string(from)});
            }
            self->system().spawn<caf::detached>(rebuild_copies, caf::actor_cast<caf::actor>(self),
                                                t, round, task, std::move(jobs), s.routing->epoch(),
                                                timeout);
          },
          [=](caf::error& e) {
            auto it = self->state.rebuilding.find(t);
            if (it == self->state.rebuilding.end() || it->second != round) return;
            rebuild_failed(self, t, net::from_caf(e));
          });
}

// PS task t is down. With replicated shards, when every shard it holds has a live replica
// elsewhere, the backups take over at once: the routing's epoch moves on, every PS task and
// worker is told, and dispatch goes on (closures that failed against t run again, routed
// to the promoted replicas). Otherwise dispatch pauses until t is restored, as without
// replicas.
void ps_down(Self* self, uint64_t t) {
  auto& st = self->state;
  if (st.replicas > 1) {
    const bool was_rejoining = st.routing->is_joining(static_cast<int32_t>(t));
    st.rebuilding.erase(t);  // a rebuild under way answers into the void
    if (st.routing->fail_over(static_cast<int32_t>(t), st.placements)) {
      if (!was_rejoining)
        st.book->ps_failed_over(st.routing->under_replicated(st.placements, st.replicas));
      std::cerr << "troupe: ps:" << t << " lost; "
                << (was_rejoining ? "it was rejoining" : "its shards failed over to their copies")
                << " (epoch " << st.routing->epoch() << ")" << std::endl;
      announce(self);
      dispatch(self);
      return;
    }
    if (st.routing->is_lost(static_cast<int32_t>(t))) return;  // lost already
  }
  st.ps.at(t).down = true;
}

// No closure finished for the watchdog timeout while some are pending: say what is where.
void watchdog_check(Self* self) {
  auto& st = self->state;
  const auto now = Clock::now();
  const auto timeout = st.config.watchdog_timeout;
  if (!anything_pending(st) || now - st.last_progress < timeout || now - st.last_report < timeout)
    return;
  using std::chrono::duration_cast;
  using std::chrono::milliseconds;
  WatchdogReport report;
  report.since_progress = duration_cast<milliseconds>(now - st.last_progress);
  report.queued = st.queue.size();
  for (size_t w = 0; w < st.workers.size(); ++w) {
    const auto& v = st.workers[w];
    WatchdogReport::Worker r;
    r.index = static_cast<int>(w);
    r.alive = v.alive;
    for (const auto& s : v.out)
      r.in_flight.push_back({s.id, s.step, duration_cast<milliseconds>(now - s.at)});
    report.workers.push_back(std::move(r));
  }
  for (size_t t = 0; t < st.ps.size(); ++t)
    if (st.ps[t].down) report.ps_down.push_back(static_cast<int>(t));
  st.last_report = now;
  if (st.config.on_watchdog) {
    st.config.on_watchdog(report);
  } else {
    std::cerr << "troupe: watchdog: " << report.to_string() << std::endl;
  }
  st.book->watchdog_fired();  // after the report is out: a waiter on the count may read it
}

void forget_dataset(Self* self, const std::string& name) {
  for (const auto& v : self->state.workers)
    self->send(v.proxy, chief::forget_atom::value, name);
}

// Every worker proxy builds the dataset (or records it, for a worker that is not there);
// the call answers once all have, with the first worker's own error if any.
caf::result<caf::ok_atom> create_dataset(Self* self, const std::string& name) {
  auto& st = self->state;
  // Before any promise is made: a promise takes over the answer to this request.
  if (st.workers.empty()) return caf::ok_atom::value;
  struct Tally {
    caf::typed_response_promise<caf::ok_atom> promise;
    size_t left;
    std::optional<core::Error> failed;
  };
  auto tally = std::make_shared<Tally>(
      Tally{self->make_response_promise<caf::ok_atom>(), st.workers.size(), {}});
  auto one_done = [self, tally, name](std::optional<core::Error> error) {
    if (error && !tally->failed) tally->failed = std::move(error);
    if (--tally->left > 0) return;
    if (!tally->failed) {
      tally->promise.deliver(caf::ok_atom::value);
      return;
    }
    forget_dataset(self, name);  // failed: not the job's; a worker that rejoins skips it
    tally->promise.deliver(net::to_caf(core::make_error(
        tally->failed->code,
        "dataset '" + split_dataset_request(name).first + "': " + tally->failed->message)));
  };
  // A proxy answers within closure_timeout (its bound on the worker's build).
  const auto bound = st.config.closure_timeout * 2 + std::chrono::seconds(1);
  for (const auto& v : st.workers)
    self->request(v.proxy, bound, net::dataset_atom::value, name)
        .then([one_done](caf::ok_atom) { one_done(std::nullopt); },
              [one_done](caf::error& e) {
                one_done(chief::is_application_error(e) ? std::optional(net::from_caf(e))
                                                        : std::nullopt);
              });
  return tally->promise;
}

// Asks every task to shut down (through its proxy, which knows its current connection or
// reaches its address afresh) and answers, with the tasks that did not acknowledge, once
// each has answered: the chief exits right after this answer, and a message still on its
// way would be lost with it, leaving that task serving until something kills it.
caf::result<std::vector<std::string>> shutdown_tasks(Self* self) {
  auto& st = self->state;
  std::vector<std::pair<std::string, caf::actor>> tasks;
  for (size_t w = 0; w < st.workers.size(); ++w)
    tasks.emplace_back("worker:" + std::to_string(w), st.workers[w].proxy);
  for (size_t t = 0; t < st.ps.size(); ++t)
    tasks.emplace_back("ps:" + std::to_string(t), st.ps[t].proxy);
  if (tasks.empty()) return std::vector<std::string>{};
  struct Tally {
    caf::typed_response_promise<std::vector<std::string>> promise;
    size_t left;
    std::vector<std::string> silent;
  };
  auto tally = std::make_shared<Tally>(
      Tally{self->make_response_promise<std::vector<std::string>>(), tasks.size(), {}});
  // Each silent task as "worker:3 (why)".
  auto one_done = [tally](const std::string& name, const std::string& why) {
    if (!why.empty()) tally->silent.push_back(name + " (" + why + ")");
    if (--tally->left > 0) return;
    std::sort(tally->silent.begin(), tally->silent.end());
    tally->promise.deliver(std::move(tally->silent));
  };
  // Each proxy answers within shutdown_bound (shut_down_task's own bounds).
  const auto bound = shutdown_bound + std::chrono::seconds(1);
  for (const auto& [name, proxy] : tasks)
    self->request(proxy, bound, net::shutdown_atom::value)
        .then([one_done, name = name](std::string& why) { one_done(name, why); },
              [one_done, name = name](caf::error& e) {
                one_done(name, "its proxy: " + caf::to_string(e));
              });
  return tally->promise;
}

caf::behavior coordinator(Self* self, std::vector<Endpoint> workers, std::vector<Endpoint> ps,
                          std::vector<net::Placement> placements,
                          std::shared_ptr<PsRouting> routing, std::shared_ptr<ClosureBook> book,
                          CoordinatorConfig config) {
  auto& st = self->state;
  config.max_in_flight_per_worker = std::max<size_t>(1, config.max_in_flight_per_worker);
  st.config = config;
  st.book = book;
  st.routing = routing ? std::move(routing) : std::make_shared<PsRouting>();
  st.replicas = replica_count(placements);
  st.placements = placements;
  for (size_t w = 0; w < workers.size(); ++w)
    st.workers.push_back(CoordinatorState::WorkerView{
        spawn_worker_proxy(self, w, std::move(workers[w]), placements, st.routing, book, config),
        true,
        false,
        {}});
  for (const auto& p : ps)
    st.ps_addresses.push_back(p.host + ":" + std::to_string(p.port));
  for (size_t t = 0; t < ps.size(); ++t)
    st.ps.push_back(CoordinatorState::PsView{
        spawn_ps_proxy(self, t, std::move(ps[t]), st.routing, st.replicas > 1, book, config), false,
        false});
  st.last_progress = Clock::now();
  st.last_report = Clock::time_point{};
  if (config.watchdog_timeout.count() > 0)
    self->delayed_send(self, config.watchdog_timeout / 4, chief::watchdog_atom::value);
  return {
      [=](net::run_atom, net::ClosureMsg& c) {
        auto& st = self->state;
        if (c.id <= st.cancelled_through) {
          st.book->cancel(c.id, st.cancelled_why);
          return;
        }
        // Time without progress counts from here when nothing was pending.
        if (!anything_pending(st)) st.last_progress = Clock::now();
        st.queue.push_back(std::move(c));
        dispatch(self);
      },
      [=](net::dataset_atom, std::string& name) { return create_dataset(self, name); },
      [=](chief::forget_atom, const std::string& name) { forget_dataset(self, name); },
      [=](net::shutdown_atom) { return shutdown_tasks(self); },
      [=](chief::ready_atom, uint64_t w) {
        auto& v = self->state.workers.at(w);
        v.ready = true;
        if (!v.alive) {
          v.alive = true;
          self->state.book->worker_rejoined();
        }
        dispatch(self);
      },
      [=](chief::lost_atom, uint64_t w, std::vector<net::ClosureMsg>& held) {
        worker_lost(self, w, held);
        dispatch(self);
      },
      [=](chief::back_atom, uint64_t w, std::vector<net::ClosureMsg>& closures) {
        for (const auto& c : closures)
          forget(self, w, c.id);
        requeue(self, closures, 0, /*count=*/false);
        dispatch(self);
      },
      [=](chief::done_atom, uint64_t w, uint64_t id) {
        forget(self, w, id);
        self->state.losses.erase(id);
        const auto now = Clock::now();
        self->state.book->progress_gap(
            std::chrono::duration_cast<std::chrono::milliseconds>(now - self->state.last_progress));
        self->state.last_progress = now;
        self->state.unavailable_streak = 0;
        dispatch(self);
      },
      [=](chief::failed_atom, uint64_t w, net::ClosureMsg& c, caf::error& err) {
        forget(self, w, c.id);
        step_failed(self, c, err);
        dispatch(self);
      },
      [=](chief::ps_down_atom, uint64_t t) { ps_down(self, t); },
      [=](chief::ps_join_atom, uint64_t t, caf::actor& task) { start_rebuild(self, t, task); },
      [=](chief::rebuilt_atom, uint64_t t, uint64_t round, int64_t shards) {
        auto& s = self->state;
        auto it = s.rebuilding.find(t);
        if (it == s.rebuilding.end() || it->second != round) return;
        s.rebuilding.erase(it);
        if (!s.routing->finish_rejoin(static_cast<int32_t>(t))) return;
        s.book->replicas_rebuilt(shards, s.routing->under_replicated(s.placements, s.replicas));
        std::cerr << "troupe: ps:" << t << " rejoined with copies of its " << shards
                  << " shards (epoch " << s.routing->epoch() << ")" << std::endl;
        announce(self);
      },
      [=](chief::rebuilt_atom, uint64_t t, uint64_t round, caf::error& err) {
        auto it = self->state.rebuilding.find(t);
        if (it == self->state.rebuilding.end() || it->second != round) return;
        rebuild_failed(self, t, net::from_caf(err));
      },
      [=](chief::ps_up_atom, uint64_t t) {
        self->state.ps.at(t).down = false;
        self->state.unavailable_streak = 0;
        dispatch(self);
      },
      [=](chief::ps_failed_atom, uint64_t t, caf::error& err) {
        auto& p = self->state.ps.at(t);
        p.down = false;
        p.failed = true;
        const core::Error e = net::from_caf(err);
        self->state.book->abort(e);
        cancel_all(self, e);
        dispatch(self);
      },
      [=](chief::resume_atom) {
        self->state.paused = false;
        dispatch(self);
      },
      [=](chief::watchdog_atom) {
        watchdog_check(self);
        self->delayed_send(self, self->state.config.watchdog_timeout / 4,
                           chief::watchdog_atom::value);
      },
  };
}

}  // namespace

caf::actor spawn_coordinator(caf::actor_system& sys, std::vector<Endpoint> workers,
                             std::vector<Endpoint> ps, std::vector<net::Placement> placements,
                             std::shared_ptr<ClosureBook> book, CoordinatorOptions config,
                             std::shared_ptr<PsRouting> routing) {
  return sys.spawn(coordinator, std::move(workers), std::move(ps), std::move(placements),
                   std::move(routing), std::move(book), std::move(config));
}

}  // namespace troupe::actors
