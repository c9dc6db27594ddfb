#include "actors/coordinator.hpp"

#include <algorithm>
#include <iostream>
#include <sstream>

#include <caf/io/all.hpp>

#include "actors/coordinator_steps.hpp"
#include "net/connect.hpp"
#include "net/gate.hpp"

namespace troupe::actors {

// Named rather than anonymous: coordinator_ps.cpp holds the PS half of these steps.
namespace coordinator_steps {

using InFlight = CoordinatorState::InFlight;
// Local to the coordinator: try a lost worker's address again.
using rejoin_atom = caf::atom_constant<caf::atom("rejoin")>;
// Local: end a pause (the PS ones are in coordinator_steps.hpp).
using resume_atom = caf::atom_constant<caf::atom("resume")>;
using watchdog_atom = caf::atom_constant<caf::atom("watchdog")>;
// Local: the periodic look for running closures past their closure_timeout.
using overdue_atom = caf::atom_constant<caf::atom("overdue")>;
// How long the shutdown at the end of a job waits for each task's acknowledgement.
constexpr std::chrono::seconds shutdown_ack_timeout{3};

void schedule_rejoin(Self* self, size_t w) {
  self->delayed_send(self, self->state.config.rejoin_interval, rejoin_atom::value,
                     static_cast<uint64_t>(w));
}

std::vector<InFlight>::iterator find_in_flight(CoordinatorState::Worker& slot, uint64_t id) {
  return std::find_if(slot.in_flight.begin(), slot.in_flight.end(),
                      [&](const InFlight& f) { return f.closure.id == id; });
}

// The worker runs its closures in the order sent: the first unanswered one is running.
// Its closure_timeout starts when it does; a periodic check (check_overdue) compares.
// Deliberately no timer per closure: CAF 0.17 keeps every request timeout and delayed
// message in its clock until it fires, even after the reply came (~220 bytes each, seen
// as the chief growing 2.7 MB per 10k closures with 60 s timeouts).
void time_head(Self* self, size_t w) {
  auto& slot = self->state.workers[w];
  if (!slot.in_flight.empty() && !slot.in_flight.front().started)
    slot.in_flight.front().started = CoordinatorState::Clock::now();
}

// How often running closures are compared with closure_timeout: a quarter of it (a
// closure is taken back between 1 and 1.25 timeouts after it started), at least 10 ms.
std::chrono::milliseconds overdue_period(const CoordinatorConfig& config) {
  return std::max(std::chrono::milliseconds(10), config.closure_timeout / 4);
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
// front of the queue (cancelled ones are settled and stay dropped); then looks for it
// again. The closure it was running counts a loss against that closure.
void requeue(Self* self, size_t w) {
  auto& st = self->state;
  auto& slot = st.workers[w];
  if (!slot.alive) return;
  st.book->worker_lost();
  slot.alive = false;
  slot.ready = false;
  ++slot.generation;
  if (slot.handle) self->demonitor(slot.handle);
  std::optional<core::Error> poison;
  if (!slot.in_flight.empty() && !slot.in_flight.front().cancelled) {
    const net::ClosureMsg& running = slot.in_flight.front().closure;
    const int lost = ++st.losses[running.id];
    if (st.config.max_closure_losses > 0 && lost >= st.config.max_closure_losses) {
      // internal, not unavailable: restarting the job would crash its workers again
      // (a permanent failure, exit code 1).
      poison = core::make_error(core::Errc::internal,
                                "closure " + std::to_string(running.id) + " (step '" +
                                    running.step + "') lost its worker " + std::to_string(lost) +
                                    " times; the last was worker:" + std::to_string(w));
      st.book->fail(running.id, *poison);
      st.losses.erase(running.id);
      slot.in_flight.erase(slot.in_flight.begin());
    }
  }
  // Newest first to the front, so the oldest ends up first in the queue.
  for (auto it = slot.in_flight.rbegin(); it != slot.in_flight.rend(); ++it) {
    if (it->cancelled) continue;
    st.queue.push_front(std::move(it->closure));
    st.book->retried();
  }
  slot.in_flight.clear();
  for (auto& call : st.dataset_calls)
    call.waiting.erase(w);  // it builds the dataset when it rejoins
  settle_dataset_calls(self);
  if (poison) cancel_all(self, *poison);
  schedule_rejoin(self, w);
}

// The first error ends the work: queued closures are cancelled, and so are those in
// flight: their RemoteValues report `cancelled` now, and each busy worker's control actor
// is told, so that a closure waiting in its mailbox is dropped unrun and a running step
// sees StepContext::cancelled() and its PS requests fail. join() returns at once.
void cancel_all(Self* self, const core::Error& why) {
  auto& st = self->state;
  for (const auto& c : st.queue)
    st.book->cancel(c.id, why);
  st.queue.clear();
  const uint64_t through = st.book->last_id();
  for (auto& slot : st.workers) {
    bool told = false;
    for (auto& f : slot.in_flight) {
      if (f.cancelled) continue;
      st.book->cancel(f.closure.id, why);
      f.cancelled = true;
      told = true;
    }
    if (told && slot.alive && slot.control)
      self->send(slot.control, net::cancel_atom::value, through);
  }
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
        .then(
            [=](caf::actor& control) {
              auto& s = self->state.workers[w];
              if (s.generation != generation) return;
              s.control = std::move(control);
              then_next();
            },
            on_error);
  } else {
    self->request(slot.handle, st.config.closure_timeout, net::dataset_atom::value,
                  st.datasets[next_dataset - 1])
        .then([=](caf::ok_atom) { then_next(); }, on_error);
  }
}

// Asks every task to shut down and answers, with the tasks that did not acknowledge, once
// each acknowledged or could not be reached within shutdown_ack_timeout: the chief exits
// right after this answer, and a message still on its way (in the middleman or a tunnel)
// would be lost with it, leaving that task serving until something kills it. A task known
// lost, or not connected yet, is reached at its address afresh: it may be back without
// having rejoined.
caf::result<std::vector<std::string>> shutdown_tasks(Self* self) {
  struct Task {
    std::string name;
    const Endpoint* endpoint;
    bool live;
  };
  std::vector<Task> tasks;
  for (size_t w = 0; w < self->state.workers.size(); ++w) {
    const auto& slot = self->state.workers[w];
    tasks.push_back({"worker:" + std::to_string(w), &slot, slot.alive && slot.handle});
  }
  for (size_t t = 0; t < self->state.ps.size(); ++t) {
    const auto& p = self->state.ps[t];
    tasks.push_back({"ps:" + std::to_string(t), &p, !p.restoring && !p.failed && p.handle});
  }
  if (tasks.empty()) return std::vector<std::string>{};
  struct Tally {
    caf::typed_response_promise<std::vector<std::string>> promise;
    size_t left;
    std::vector<std::string> silent;
  };
  auto tally = std::make_shared<Tally>(
      Tally{self->make_response_promise<std::vector<std::string>>(), tasks.size(), {}});
  auto one_done = [tally](const std::string& name, bool acknowledged) {
    if (!acknowledged) tally->silent.push_back(name);
    if (--tally->left > 0) return;
    std::sort(tally->silent.begin(), tally->silent.end());
    tally->promise.deliver(std::move(tally->silent));
  };
  auto ask = [self, one_done](const caf::actor& task, const std::string& name) {
    self->request(task, shutdown_ack_timeout, net::shutdown_atom::value)
        .then([one_done, name](caf::ok_atom) { one_done(name, true); },
              [one_done, name](caf::error&) { one_done(name, false); });
  };
  auto mm = self->system().middleman().actor_handle();
  for (const auto& t : tasks) {
    if (t.live) {
      ask(t.endpoint->handle, t.name);
      continue;
    }
    auto route = net::caf_route(t.endpoint->host, t.endpoint->port);
    if (!route) {
      one_done(t.name, false);
      continue;
    }
    const std::string name = t.name;
    self->request(mm, shutdown_ack_timeout, caf::connect_atom::value, route->host, route->port)
        .then(
            [ask, one_done, name](caf::node_id&, caf::strong_actor_ptr& ptr,
                                  std::set<std::string>&) {
              if (ptr)
                ask(caf::actor_cast<caf::actor>(ptr), name);
              else
                one_done(name, false);
            },
            [one_done, name](caf::error&) { one_done(name, false); });
  }
  return tally->promise;
}

void try_rejoin(Self* self, size_t w) {
  auto& slot = self->state.workers[w];
  if (slot.alive) return;
  const uint64_t generation = slot.generation;
  // With a cluster secret, through this process's tunnel to the worker's gate.
  auto route = net::caf_route(slot.host, slot.port);
  if (!route) return schedule_rejoin(self, w);
  auto mm = self->system().middleman().actor_handle();
  self->request(mm, std::chrono::seconds(2), caf::connect_atom::value, route->host, route->port)
      .then(
          [=](caf::node_id&, caf::strong_actor_ptr& ptr, std::set<std::string>&) {
            auto& s = self->state.workers[w];
            if (s.alive || s.generation != generation) return;
            if (!ptr || net::is_terminated(caf::actor_cast<caf::actor>(ptr))) {
              schedule_rejoin(self, w);
              return;
            }
            s.handle = caf::actor_cast<caf::actor>(ptr);
            s.control = nullptr;
            ++s.generation;
            self->monitor(s.handle);
            prepare(self, w, s.generation, 0, /*rejoin=*/true);
          },
          [=](caf::error&) {
            if (self->state.workers[w].generation == generation) schedule_rejoin(self, w);
          });
}

void send_closure(Self* self, size_t w) {
  auto& st = self->state;
  net::ClosureMsg c = std::move(st.queue.front());
  st.queue.pop_front();
  c.settled_below = st.book->settled_below();
  const uint64_t id = c.id;
  auto& slot = st.workers[w];
  const uint64_t generation = slot.generation;
  // No CAF timeout on this request: its bound is the coordinator's own closure_timeout,
  // counted from when the worker starts the closure (check_overdue), and a worker that
  // dies or stops answering heartbeats is lost by its down message (requeue).
  self->request(slot.handle, caf::infinite, net::run_atom::value, c)
      .then(
          [=](std::vector<char>& bytes) {
            auto& s = self->state.workers[w];
            if (s.generation != generation) return;  // put back when the worker was lost
            auto it = find_in_flight(s, id);
            if (it == s.in_flight.end()) return;
            const bool cancelled = it->cancelled;
            s.in_flight.erase(it);
            time_head(self, w);
            self->state.losses.erase(id);
            self->state.last_progress = CoordinatorState::Clock::now();
            if (!cancelled) {
              self->state.unavailable_streak = 0;
              self->state.book->complete(id, std::move(bytes));
            }
            dispatch(self);
          },
          [=](caf::error& err) {
            auto& s = self->state.workers[w];
            if (s.generation != generation) return;
            auto it = find_in_flight(s, id);
            if (it == s.in_flight.end()) return;
            if (it->cancelled && is_application_error(err)) {
              // Its RemoteValue already says cancelled; the worker has let go of it.
              s.in_flight.erase(it);
              time_head(self, w);
              self->state.losses.erase(id);
              dispatch(self);
              return;
            }
            const core::Error e = net::from_caf(err);
            if (is_application_error(err) && e.code == core::Errc::unavailable &&
                retry_unavailable(self)) {
              // Run it again once the PS is back; its pushes that did land are ignored then.
              self->state.queue.push_front(std::move(it->closure));
              s.in_flight.erase(it);
              time_head(self, w);
              self->state.book->retried();
              if (!any_ps_restoring(self->state) && !self->state.paused) {
                self->state.paused = true;
                self->delayed_send(self, self->state.config.rejoin_interval, resume_atom::value);
              }
              dispatch(self);
              return;
            }
            if (is_application_error(err)) {
              s.in_flight.erase(it);
              time_head(self, w);
              self->state.losses.erase(id);
              self->state.last_progress = CoordinatorState::Clock::now();
              self->state.book->fail(id, e);
              cancel_all(self, e);
            } else {
              // The worker is unreachable or too slow: its closures run elsewhere.
              requeue(self, w);
            }
            dispatch(self);
          });
  slot.in_flight.push_back(InFlight{std::move(c), CoordinatorState::Clock::now(), {}, false});
  time_head(self, w);
}

// A worker whose running closure has run for closure_timeout is hung or too slow: it is
// lost, its closures run elsewhere and its address is tried again.
void check_overdue(Self* self) {
  const auto now = CoordinatorState::Clock::now();
  auto& st = self->state;
  bool lost = false;
  for (size_t w = 0; w < st.workers.size(); ++w) {
    const auto& slot = st.workers[w];
    if (!slot.alive || slot.in_flight.empty() || !slot.in_flight.front().started) continue;
    if (now - *slot.in_flight.front().started < st.config.closure_timeout) continue;
    requeue(self, w);
    lost = true;
  }
  if (lost) dispatch(self);
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
    for (const auto& f : slot.in_flight)
      r.in_flight.push_back(
          {f.closure.id, f.closure.step, duration_cast<milliseconds>(now - f.sent)});
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
  if (st.paused || any_ps_restoring(st)) return;  // a PS is being restored
  std::vector<WorkerLoad> loads(st.workers.size());
  for (size_t w = 0; w < st.workers.size(); ++w) {
    const auto& slot = st.workers[w];
    loads[w] = {slot.alive, slot.alive && slot.ready, slot.in_flight.size()};
  }
  while (!st.queue.empty()) {
    const size_t best = pick_worker(loads, st.last_dispatched, st.config.max_in_flight_per_worker);
    if (best == loads.size()) return;  // every worker is busy or missing
    st.last_dispatched = best;
    ++loads[best].in_flight;
    send_closure(self, best);
  }
}

}  // namespace coordinator_steps

using coordinator_steps::Self;
using namespace coordinator_steps;

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
  if (!self->state.ps.empty()) self->send(self, poll_atom::value);
  self->delayed_send(self, overdue_period(config), overdue_atom::value);
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
            for (auto& c : self->state.dataset_calls) {
              if (c.name != name || !c.waiting.count(w)) continue;
              c.waiting.erase(w);
              if (error && !c.failed) c.failed = error;
              break;
            }
            settle_dataset_calls(self);
          };
          self->request(slot.handle, st.config.closure_timeout, net::dataset_atom::value, name)
              .then(
                  [=](caf::ok_atom) {
                    if (self->state.workers[w].generation == generation) done(std::nullopt);
                  },
                  [=](caf::error& e) {
                    // An answer of an earlier connection: that worker was lost and skipped;
                    // it must not take down the one that rejoined since.
                    if (self->state.workers[w].generation != generation) return;
                    // The worker's own error fails the call; CAF's (it is gone) skips it.
                    if (is_application_error(e)) return done(net::from_caf(e));
                    requeue(self, w);
                    dispatch(self);
                  });
        }
        auto promise = call.promise;
        st.dataset_calls.push_back(std::move(call));
        settle_dataset_calls(self);
        return promise;
      },
      [=](net::shutdown_atom) { return shutdown_tasks(self); },
      [=](overdue_atom) {
        check_overdue(self);
        self->delayed_send(self, overdue_period(self->state.config), overdue_atom::value);
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
        cancel_all(self, e);
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
      [=](poll_atom) { poll_ps(self); },
      [=](rejoin_atom, uint64_t w) {
        if (w < self->state.workers.size()) try_rejoin(self, static_cast<size_t>(w));
      },
  };
}

}  // namespace troupe::actors
