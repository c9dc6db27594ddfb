#include "actors/coordinator.hpp"

#include <iostream>
#include <sstream>

#include <caf/io/all.hpp>

#include "net/connect.hpp"

namespace troupe {

std::string WatchdogReport::to_string() const {
  std::ostringstream out;
  out << "no closure finished for " << since_progress.count() << " ms; " << queued << " queued";
  for (const auto& w : workers) {
    out << "; worker:" << w.index << (w.alive ? "" : " (lost)") << ": ";
    if (w.in_flight.empty()) out << "idle";
    for (size_t i = 0; i < w.in_flight.size(); ++i)
      out << (i ? ", " : "") << "#" << w.in_flight[i].id << " " << w.in_flight[i].step << " ("
          << w.in_flight[i].age.count() << " ms)";
  }
  for (int t : ps_down)
    out << "; waiting for ps:" << t;
  return out.str();
}

}  // namespace troupe

namespace troupe::actors {

using Status = detail::RemoteState::Status;

uint64_t ClosureBook::add(std::shared_ptr<detail::RemoteState> state) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t id = next_id_++;
  pending_.emplace(id, std::move(state));
  ++counters_.scheduled;
  return id;
}

void ClosureBook::settle_locked(uint64_t id, Status s, std::vector<char> bytes, core::Error e) {
  auto it = pending_.find(id);
  if (it == pending_.end()) return;  // settled before: a late duplicate result
  it->second->settle(s, std::move(bytes), std::move(e));
  pending_.erase(it);
  cv_.notify_all();
}

void ClosureBook::complete(uint64_t id, std::vector<char> bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  if (pending_.count(id)) ++counters_.completed;
  settle_locked(id, Status::ready, std::move(bytes), {});
}

void ClosureBook::fail(uint64_t id, core::Error error) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!pending_.count(id)) return;
  ++counters_.failed;
  if (!first_error_) first_error_ = error;
  settle_locked(id, Status::failed, {}, std::move(error));
}

void ClosureBook::cancel(uint64_t id, const core::Error& why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!pending_.count(id)) return;
  ++counters_.cancelled;
  settle_locked(id, Status::cancelled, {}, why);
}

void ClosureBook::retried() {
  std::lock_guard<std::mutex> lock(mu_);
  ++counters_.retried;
}

void ClosureBook::worker_lost() {
  std::lock_guard<std::mutex> lock(mu_);
  ++counters_.workers_lost;
  cv_.notify_all();
}

void ClosureBook::worker_rejoined() {
  std::lock_guard<std::mutex> lock(mu_);
  ++counters_.worker_rejoins;
  cv_.notify_all();
}

void ClosureBook::ps_restored(int64_t updates_lost) {
  std::lock_guard<std::mutex> lock(mu_);
  ++counters_.ps_restores;
  counters_.updates_lost += updates_lost;
  cv_.notify_all();
}

void ClosureBook::watchdog_fired() {
  std::lock_guard<std::mutex> lock(mu_);
  ++counters_.watchdog_reports;
  cv_.notify_all();
}

void ClosureBook::abort(const core::Error& error) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!first_error_) first_error_ = error;
  cv_.notify_all();
}

bool ClosureBook::wait_for(const std::function<bool(const Counters&)>& pred,
                           std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, timeout, [&] { return pred(counters_); });
}

core::Status ClosureBook::join() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return pending_.empty(); });
  if (!first_error_) return {};
  core::Error e = std::move(*first_error_);
  first_error_.reset();
  return e;
}

bool ClosureBook::done() {
  std::lock_guard<std::mutex> lock(mu_);
  return pending_.empty();
}

ClosureBook::Counters ClosureBook::counters() {
  std::lock_guard<std::mutex> lock(mu_);
  return counters_;
}

namespace {

using Self = caf::stateful_actor<CoordinatorState>;
// Local to the coordinator: try a lost worker's address again.
using rejoin_atom = caf::atom_constant<caf::atom("rejoin")>;
// Local: try a PS task's address again; its deadline; poll the PS counts; end a pause.
using ps_rejoin_atom = caf::atom_constant<caf::atom("psrejoin")>;
using ps_deadline_atom = caf::atom_constant<caf::atom("psdeadln")>;
using poll_atom = caf::atom_constant<caf::atom("poll")>;
using resume_atom = caf::atom_constant<caf::atom("resume")>;
using watchdog_atom = caf::atom_constant<caf::atom("watchdog")>;

void dispatch(Self* self);

void schedule_rejoin(Self* self, size_t w) {
  self->delayed_send(self, self->state.config.rejoin_interval, rejoin_atom::value,
                     static_cast<uint64_t>(w));
}

// Answers the dataset calls that wait for no worker any more.
void settle_dataset_calls(Self* self) {
  auto& calls = self->state.dataset_calls;
  for (auto it = calls.begin(); it != calls.end();) {
    if (!it->waiting.empty()) {
      ++it;
      continue;
    }
    if (it->failed) {
      it->promise.deliver(net::to_caf(core::make_error(
          it->failed->code, "dataset '" + it->name + "': " + it->failed->message)));
    } else {
      it->promise.deliver(caf::ok_atom::value);
    }
    it = calls.erase(it);
  }
}

// Marks a worker lost (once per connection) and puts its in-flight closures back at the
// front of the queue; then looks for it again.
void requeue(Self* self, size_t w) {
  auto& slot = self->state.workers[w];
  if (!slot.alive) return;
  self->state.book->worker_lost();
  slot.alive = false;
  slot.ready = false;
  ++slot.generation;
  if (slot.handle) self->demonitor(slot.handle);
  // Newest first to the front, so the oldest ends up first in the queue.
  for (auto it = slot.in_flight.rbegin(); it != slot.in_flight.rend(); ++it) {
    self->state.queue.push_front(std::move(it->second.closure));
    self->state.book->retried();
  }
  slot.in_flight.clear();
  for (auto& call : self->state.dataset_calls)
    call.waiting.erase(w);  // it builds the dataset when it rejoins
  settle_dataset_calls(self);
  schedule_rejoin(self, w);
}

void cancel_queued(Self* self, const core::Error& why) {
  for (const auto& c : self->state.queue)
    self->state.book->cancel(c.id, why);
  self->state.queue.clear();
}

// An error the worker itself replied with (category troupe: the step's outcome, even when
// that is "my PS is unavailable") fails the closure. CAF's own errors (request timeout,
// receiver down) mean the worker could not answer: the closure runs elsewhere.
bool is_application_error(const caf::error& e) {
  return e.category() == net::error_category;
}

// Brings a worker up to date: placement first, then (when it rejoins) every per-worker
// dataset in turn (a rebuilt iterator starts from the top), then it takes closures. At
// start-up the user's thread has each worker build its datasets. Any failure on the way
// counts as the worker missing.
void prepare(Self* self, size_t w, uint64_t generation, size_t next_dataset, bool rejoin) {
  auto& st = self->state;
  auto& slot = st.workers[w];
  auto on_error = [=](caf::error&) {
    auto& s = self->state.workers[w];
    if (s.generation != generation) return;
    if (rejoin) {
      schedule_rejoin(self, w);  // not lost again: it never came back
    } else {
      requeue(self, w);
    }
  };
  auto then_next = [=] {
    auto& s = self->state.workers[w];
    if (s.generation != generation) return;
    if (rejoin && next_dataset < self->state.datasets.size()) {
      prepare(self, w, generation, next_dataset + 1, rejoin);
      return;
    }
    s.ready = true;
    s.alive = true;
    if (rejoin) self->state.book->worker_rejoined();
    dispatch(self);
  };
  if (next_dataset == 0) {
    self->request(slot.handle, st.config.closure_timeout, net::vars_atom::value, st.placements)
        .then([=](caf::ok_atom) { then_next(); }, on_error);
  } else {
    self->request(slot.handle, st.config.closure_timeout, net::dataset_atom::value,
                  st.datasets[next_dataset - 1])
        .then([=](caf::ok_atom) { then_next(); }, on_error);
  }
}

void try_rejoin(Self* self, size_t w) {
  auto& slot = self->state.workers[w];
  if (slot.alive) return;
  const uint64_t generation = slot.generation;
  auto mm = self->system().middleman().actor_handle();
  self->request(mm, std::chrono::seconds(2), caf::connect_atom::value, slot.host, slot.port)
      .then(
          [=](caf::node_id&, caf::strong_actor_ptr& ptr, std::set<std::string>&) {
            auto& s = self->state.workers[w];
            if (s.alive || s.generation != generation) return;
            if (!ptr || net::is_terminated(caf::actor_cast<caf::actor>(ptr))) {
              schedule_rejoin(self, w);
              return;
            }
            s.handle = caf::actor_cast<caf::actor>(ptr);
            ++s.generation;
            self->monitor(s.handle);
            prepare(self, w, s.generation, 0, /*rejoin=*/true);
          },
          [=](caf::error&) {
            if (self->state.workers[w].generation == generation) schedule_rejoin(self, w);
          });
}

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

// A PS task answers on its address again. It restored itself from its snapshot before
// publishing (serve() does), so its stats say from which update count.
void try_ps_rejoin(Self* self, size_t t) {
  auto& p = self->state.ps[t];
  if (!p.restoring) return;
  const uint64_t generation = p.generation;
  auto retry = [=] {
    if (self->state.ps[t].restoring && self->state.ps[t].generation == generation)
      schedule_ps_rejoin(self, t);
  };
  auto mm = self->system().middleman().actor_handle();
  self->request(mm, std::chrono::seconds(2), caf::connect_atom::value, p.host, p.port)
      .then(
          [=](caf::node_id&, caf::strong_actor_ptr& ptr, std::set<std::string>&) {
            auto& q = self->state.ps[t];
            if (!q.restoring || q.generation != generation) return;
            if (!ptr || net::is_terminated(caf::actor_cast<caf::actor>(ptr))) return retry();
            q.handle = caf::actor_cast<caf::actor>(ptr);
            self->monitor(q.handle);
            self->request(q.handle, self->state.config.closure_timeout, net::stats_atom::value)
                .then(
                    [=](std::vector<int64_t>& stats) {
                      auto& r = self->state.ps[t];
                      if (!r.restoring || r.generation != generation) return;
                      const std::string task = "ps:" + std::to_string(t);
                      if (stats.size() < 6 || stats[5] < 0) {
                        // Back, but empty: its variables are gone.
                        r.restoring = false;
                        r.failed = true;
                        const auto e = core::make_error(
                            core::Errc::data_loss,
                            task +
                                " came back without a snapshot to restore; its variables "
                                "are lost");
                        self->state.book->abort(e);
                        cancel_queued(self, e);
                        dispatch(self);
                        return;
                      }
                      r.restoring = false;
                      self->state.book->ps_restored(
                          std::max<int64_t>(0, r.last_updates - stats[5]));
                      r.last_updates = stats[2];
                      self->state.unavailable_streak = 0;
                      dispatch(self);
                    },
                    [=](caf::error&) { retry(); });
          },
          [=](caf::error&) { retry(); });
}

void send_closure(Self* self, size_t w) {
  net::ClosureMsg c = std::move(self->state.queue.front());
  self->state.queue.pop_front();
  const uint64_t id = c.id;
  auto& slot = self->state.workers[w];
  const uint64_t generation = slot.generation;
  self->request(slot.handle, self->state.config.closure_timeout, net::run_atom::value, c)
      .then(
          [=](std::vector<char>& bytes) {
            auto& s = self->state.workers[w];
            if (s.generation != generation) return;  // put back when the worker was lost
            if (s.in_flight.erase(id) == 0) return;
            self->state.unavailable_streak = 0;
            self->state.last_progress = CoordinatorState::Clock::now();
            self->state.book->complete(id, std::move(bytes));
            dispatch(self);
          },
          [=](caf::error& err) {
            auto& s = self->state.workers[w];
            if (s.generation != generation || s.in_flight.count(id) == 0) return;
            const core::Error e = net::from_caf(err);
            if (is_application_error(err) && e.code == core::Errc::unavailable &&
                retry_unavailable(self)) {
              // Run it again once the PS is back; its pushes that did land are ignored then.
              auto node = s.in_flight.extract(id);
              self->state.queue.push_front(std::move(node.mapped().closure));
              self->state.book->retried();
              if (!any_ps_restoring(self->state) && !self->state.paused) {
                self->state.paused = true;
                self->delayed_send(self, self->state.config.rejoin_interval, resume_atom::value);
              }
              dispatch(self);
              return;
            }
            if (is_application_error(err)) {
              s.in_flight.erase(id);
              self->state.last_progress = CoordinatorState::Clock::now();
              self->state.book->fail(id, e);
              cancel_queued(self, e);
            } else {
              // The worker is unreachable or too slow: its closures run elsewhere.
              requeue(self, w);
            }
            dispatch(self);
          });
  slot.in_flight.emplace(id,
                         CoordinatorState::InFlight{std::move(c), CoordinatorState::Clock::now()});
}

bool anything_pending(const CoordinatorState& st) {
  if (!st.queue.empty()) return true;
  return std::any_of(st.workers.begin(), st.workers.end(),
                     [](const auto& w) { return !w.in_flight.empty(); });
}

// No closure finished for the watchdog timeout while some are pending: say what is where.
void watchdog_check(Self* self) {
  auto& st = self->state;
  const auto now = CoordinatorState::Clock::now();
  const auto timeout = st.config.watchdog_timeout;
  if (!anything_pending(st) || now - st.last_progress < timeout || now - st.last_report < timeout)
    return;
  using std::chrono::duration_cast;
  using std::chrono::milliseconds;
  WatchdogReport report;
  report.since_progress = duration_cast<milliseconds>(now - st.last_progress);
  report.queued = st.queue.size();
  for (size_t w = 0; w < st.workers.size(); ++w) {
    const auto& slot = st.workers[w];
    WatchdogReport::Worker r;
    r.index = static_cast<int>(w);
    r.alive = slot.alive;
    for (const auto& [id, f] : slot.in_flight)
      r.in_flight.push_back({id, f.closure.step, duration_cast<milliseconds>(now - f.sent)});
    report.workers.push_back(std::move(r));
  }
  for (size_t t = 0; t < st.ps.size(); ++t)
    if (st.ps[t].restoring) report.ps_down.push_back(static_cast<int>(t));
  st.last_report = now;
  if (st.config.on_watchdog) {
    st.config.on_watchdog(report);
  } else {
    std::cerr << "troupe: watchdog: " << report.to_string() << std::endl;
  }
  st.book->watchdog_fired();  // after the report is out: a waiter on the count may read it
}

void dispatch(Self* self) {
  auto& st = self->state;
  // Each closure goes to the worker with the fewest in flight (ties: the next one after
  // the last chosen), so that closures arriving one at a time spread over every idle
  // worker before any worker gets a second.
  if (st.paused || any_ps_restoring(st)) return;  // a PS is being restored
  const size_t n = st.workers.size();
  while (!st.queue.empty()) {
    size_t best = n;
    for (size_t k = 1; k <= n; ++k) {
      const size_t w = (st.last_dispatched + k) % n;
      const auto& slot = st.workers[w];
      if (!slot.ready || !slot.alive || slot.in_flight.size() >= st.config.max_in_flight_per_worker)
        continue;
      if (best == n || slot.in_flight.size() < st.workers[best].in_flight.size()) best = w;
    }
    if (best == n) return;  // every worker is busy or missing
    st.last_dispatched = best;
    send_closure(self, best);
  }
}

}  // namespace

caf::behavior coordinator(Self* self, std::vector<Endpoint> workers, std::vector<Endpoint> ps,
                          std::vector<net::Placement> placements, std::shared_ptr<ClosureBook> book,
                          CoordinatorConfig config) {
  self->state.book = std::move(book);
  self->state.placements = std::move(placements);
  config.max_in_flight_per_worker = std::max<size_t>(1, config.max_in_flight_per_worker);
  self->state.config = config;
  for (auto& e : workers) {
    self->monitor(e.handle);
    CoordinatorState::Worker slot;
    static_cast<Endpoint&>(slot) = std::move(e);
    self->state.workers.push_back(std::move(slot));
  }
  for (auto& e : ps) {
    if (config.ps_recovery) self->monitor(e.handle);
    CoordinatorState::Ps p;
    static_cast<Endpoint&>(p) = std::move(e);
    self->state.ps.push_back(std::move(p));
  }
  if (config.ps_recovery) self->send(self, poll_atom::value);
  self->state.last_progress = CoordinatorState::Clock::now();
  self->state.last_report = CoordinatorState::Clock::time_point{};
  if (config.watchdog_timeout.count() > 0)
    self->delayed_send(self, config.watchdog_timeout / 4, watchdog_atom::value);
  self->set_down_handler([=](caf::down_msg& dm) {
    for (size_t t = 0; t < self->state.ps.size(); ++t)
      if (self->state.ps[t].handle.address() == dm.source) ps_down(self, t);
    for (size_t w = 0; w < self->state.workers.size(); ++w) {
      auto& slot = self->state.workers[w];
      if (slot.handle.address() != dm.source) continue;
      if (slot.alive) {
        requeue(self, w);
      } else {
        // Gone again while being brought up to date: drop what was asked of it.
        ++slot.generation;
        schedule_rejoin(self, w);
      }
    }
    dispatch(self);
  });
  for (size_t w = 0; w < self->state.workers.size(); ++w)
    prepare(self, w, 0, 0, /*rejoin=*/false);
  return {
      [=](net::run_atom, net::ClosureMsg& c) {
        // Time without progress counts from here when nothing was pending.
        if (!anything_pending(self->state))
          self->state.last_progress = CoordinatorState::Clock::now();
        self->state.queue.push_back(std::move(c));
        dispatch(self);
      },
      [=](net::dataset_atom, std::string& name) -> caf::result<caf::ok_atom> {
        auto& st = self->state;
        if (std::find(st.datasets.begin(), st.datasets.end(), name) == st.datasets.end())
          st.datasets.push_back(name);
        // Every live worker builds it now; one rejoining builds it in prepare().
        CoordinatorState::DatasetCall call{self->make_response_promise(), name, {}, {}};
        for (size_t w = 0; w < st.workers.size(); ++w) {
          auto& slot = st.workers[w];
          // Not ready yet at start-up: the request follows the placement in its mailbox.
          if (!slot.alive) continue;
          call.waiting.insert(w);
          const uint64_t generation = slot.generation;
          auto done = [=](std::optional<core::Error> error) {
            if (self->state.workers[w].generation != generation) return;  // lost: skipped
            for (auto& c : self->state.dataset_calls) {
              if (c.name != name || !c.waiting.count(w)) continue;
              c.waiting.erase(w);
              if (error && !c.failed) c.failed = error;
              break;
            }
            settle_dataset_calls(self);
          };
          self->request(slot.handle, st.config.closure_timeout, net::dataset_atom::value, name)
              .then([=](caf::ok_atom) { done(std::nullopt); },
                    [=](caf::error& e) {
                      // The worker's own error fails the call; CAF's (it is gone) skips it.
                      if (is_application_error(e)) return done(net::from_caf(e));
                      requeue(self, w);
                    });
        }
        auto promise = call.promise;
        st.dataset_calls.push_back(std::move(call));
        settle_dataset_calls(self);
        return promise;
      },
      [=](net::shutdown_atom) {
        for (const auto& slot : self->state.workers)
          if (slot.handle) self->send(slot.handle, net::shutdown_atom::value);
        for (const auto& p : self->state.ps)
          if (p.handle) self->send(p.handle, net::shutdown_atom::value);
        return caf::ok_atom::value;
      },
      [=](ps_rejoin_atom, uint64_t t) {
        if (t < self->state.ps.size()) try_ps_rejoin(self, static_cast<size_t>(t));
      },
      [=](ps_deadline_atom, uint64_t t, uint64_t generation) {
        if (t >= self->state.ps.size()) return;
        auto& p = self->state.ps[t];
        if (!p.restoring || p.generation != generation) return;
        p.restoring = false;
        p.failed = true;
        const auto e = core::make_error(
            core::Errc::unavailable,
            "ps:" + std::to_string(t) + " did not come back within " +
                std::to_string(self->state.config.ps_restore_deadline.count()) + " ms");
        self->state.book->abort(e);
        cancel_queued(self, e);
        dispatch(self);
      },
      [=](watchdog_atom) {
        watchdog_check(self);
        self->delayed_send(self, self->state.config.watchdog_timeout / 4, watchdog_atom::value);
      },
      [=](resume_atom) {
        self->state.paused = false;
        dispatch(self);
      },
      [=](poll_atom) {
        // Each PS's update count, so that a restore can tell how many updates it lost.
        for (size_t t = 0; t < self->state.ps.size(); ++t) {
          const auto& p = self->state.ps[t];
          if (p.restoring || p.failed) continue;
          const uint64_t generation = p.generation;
          self->request(p.handle, self->state.config.rejoin_interval, net::stats_atom::value)
              .then(
                  [=](std::vector<int64_t>& stats) {
                    auto& q = self->state.ps[t];
                    if (q.generation == generation && !q.restoring && stats.size() > 2)
                      q.last_updates = std::max(q.last_updates, stats[2]);
                  },
                  [](caf::error&) {});
        }
        self->delayed_send(self, self->state.config.rejoin_interval, poll_atom::value);
      },
      [=](rejoin_atom, uint64_t w) {
        if (w < self->state.workers.size()) try_rejoin(self, static_cast<size_t>(w));
      },
  };
}

}  // namespace troupe::actors
