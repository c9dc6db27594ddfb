// The chief's stand-in for one remote worker. Its states are behaviours:
//
//   preparing (the placement; when it rejoins, every per-worker dataset in turn)
//     -> running (closures in flight there, in the order sent, which is the order it runs
//        them) -> recovering (its address is tried every rejoin interval) -> preparing ...
//
// It owns all the chief knows of that worker: the connection, the closures in flight and
// when the running one started (closure_timeout counts from there), the worker's control
// actor (cancellation), the datasets it must rebuild. The coordinator decides what runs
// where; this actor tells it when the worker takes closures (ready), answers (done,
// failed), or is lost (with every closure it held). Replies of an earlier connection never
// reach a state: current() drops them.
#include <algorithm>
#include <map>
#include <optional>

#include "actors/chief_protocol.hpp"

namespace troupe::actors {
namespace {

using Clock = std::chrono::steady_clock;

struct WorkerProxyState {
  struct InFlight {
    net::ClosureMsg closure;
    /// When the worker started it, as far as the chief can tell: it became the first
    /// unanswered one. closure_timeout counts from here.
    std::optional<Clock::time_point> started;
    /// Settled `cancelled` by the coordinator; the worker was told, its answer is awaited.
    bool cancelled = false;
  };
  uint64_t index = 0;
  Endpoint task;
  bool shutting_down = false;  // told to shut the worker down: its link going down is expected
  std::vector<net::Placement> placements;
  std::shared_ptr<const PsRouting> routing;  // the chief's: which replicas serve now
  caf::actor coordinator;
  std::shared_ptr<ClosureBook> book;
  CoordinatorConfig config;
  /// Counts connections to the worker; a reply or timer of an earlier one is dropped.
  uint64_t connection = 0;
  bool answered = false;  // the worker answered a closure on this connection
  caf::actor control;     // takes cancel messages while the worker is busy
  std::vector<InFlight> in_flight;
  std::vector<std::string> datasets;  // per-worker datasets, rebuilt from the top on rejoin
  /// Dataset calls waiting on this connection's worker; a lost worker answers them `ok`
  /// (skipped: it builds the dataset when it rejoins).
  std::map<uint64_t, caf::response_promise> dataset_calls;
  uint64_t next_call = 0;
  static inline const char* name = "troupe.worker_proxy";
};

using Self = caf::stateful_actor<WorkerProxyState>;

caf::behavior preparing(Self* self, bool rejoin);
caf::behavior running(Self* self);
caf::behavior recovering(Self* self);

/// `f`, run only while the connection it was made on is the current one.
template <class... Ts, class F>
auto current(Self* self, F f) {
  return while_unchanged<Ts...>(self->state.connection, std::move(f));
}

// How often the running closure is compared with closure_timeout: a quarter of it (a
// closure is taken back between 1 and 1.25 timeouts after it started), at least 10 ms.
// One timer per worker, not per closure: CAF 0.17 keeps every request timeout and delayed
// message in its clock until it fires, even after the reply came (~220 bytes each, seen as
// the chief growing 2.7 MB per 10k closures with 60 s timeouts).
void tick(Self* self) {
  const auto period =
      std::max(std::chrono::milliseconds(10), self->state.config.closure_timeout / 4);
  self->delayed_send(self, period, chief::tick_atom::value);
}

void time_head(Self* self) {
  auto& in_flight = self->state.in_flight;
  if (!in_flight.empty() && !in_flight.front().started) in_flight.front().started = Clock::now();
}

// The worker answered a closure: the first on this connection tells every proxy that the
// job's start-up moved on (check_overdue).
void answered(Self* self) {
  auto& st = self->state;
  if (st.answered) return;
  st.answered = true;
  st.book->first_closure_answered();
}

std::vector<WorkerProxyState::InFlight>::iterator find_in_flight(Self* self, uint64_t id) {
  auto& in_flight = self->state.in_flight;
  return std::find_if(in_flight.begin(), in_flight.end(),
                      [&](const auto& f) { return f.closure.id == id; });
}

void record_dataset(Self* self, const std::string& name) {
  auto& d = self->state.datasets;
  if (std::find(d.begin(), d.end(), name) == d.end()) d.push_back(name);
}

// A dataset whose creation failed is not built when the worker rejoins. Its entry is
// emptied, not erased: a preparation under way counts its steps by position.
void forget_dataset(Self* self, const std::string& name) {
  auto& d = self->state.datasets;
  std::replace(d.begin(), d.end(), name, std::string());
}

void send_back(Self* self, net::ClosureMsg& c) {
  self->send(self->state.coordinator, chief::back_atom::value, self->state.index,
             std::vector<net::ClosureMsg>{std::move(c)});
}

// Tries the address again after a rejoin interval.
void recover(Self* self) {
  self->become(recovering(self));
  self->delayed_send(self, self->state.config.rejoin_interval, chief::rejoin_atom::value,
                     self->state.connection);
}

// Ends the current connection: its replies and down message are dropped from now on.
void drop_connection(Self* self) {
  auto& st = self->state;
  ++st.connection;
  st.answered = false;
  if (st.task.handle) self->demonitor(st.task.handle);
  st.control = nullptr;
}

// The worker is lost (down, a CAF error, overdue, or it failed to come up at start-up):
// every closure it held goes to the coordinator, which queues again those still pending.
// `why` goes to the chief's log: a loss with no failure behind it (a crowded host) must
// be told apart from a crash.
void lose(Self* self, const std::string& why) {
  auto& st = self->state;
  if (!st.shutting_down)
    std::cerr << "troupe: worker:" << st.index << " lost: " << why << " (" << st.in_flight.size()
              << " closures held)" << std::endl;
  drop_connection(self);
  std::vector<net::ClosureMsg> held;
  for (auto& f : st.in_flight)
    held.push_back(std::move(f.closure));
  st.in_flight.clear();
  for (auto& call : st.dataset_calls)
    call.second.deliver(caf::ok_atom::value);
  st.dataset_calls.clear();
  self->send(st.coordinator, chief::lost_atom::value, st.index, std::move(held));
  recover(self);
}

caf::result<std::string> shut_down(Self* self, bool live) {
  self->state.shutting_down = true;
  return shut_down_reply(self, self->state.task, live);
}

// Has the worker build dataset `name`: answers `ok`, the worker's own error (no such
// dataset function), or `ok` when the worker is lost meanwhile (skipped).
caf::result<caf::ok_atom> build_dataset(Self* self, const std::string& name) {
  auto& st = self->state;
  const uint64_t call = ++st.next_call;
  auto promise = self->make_response_promise();
  st.dataset_calls.emplace(call, promise);
  auto answer = [self, call](const caf::error& e) {
    auto it = self->state.dataset_calls.find(call);
    if (it == self->state.dataset_calls.end()) return;
    if (e)
      it->second.deliver(e);
    else
      it->second.deliver(caf::ok_atom::value);
    self->state.dataset_calls.erase(it);
  };
  self->request(st.task.handle, st.config.closure_timeout, net::dataset_atom::value, name)
      .then(current<caf::ok_atom>(self, [=](caf::ok_atom) { answer(caf::error{}); }),
            current<caf::error&>(self, [=](caf::error& e) {
              if (chief::is_application_error(e)) return answer(e);
              answer(caf::error{});
              lose(self, "building dataset '" + name + "': " + self->system().render(e));
            }));
  return promise;
}

// The worker's routing to the PS replicas is brought to the chief's (after a failover, and
// when the worker (re)connects): through its control actor, so that a running step's next
// request already goes to the promoted replicas.
void tell_routing(Self* self) {
  auto& st = self->state;
  const uint64_t epoch = st.routing->epoch();
  if (st.control && epoch > 0)
    self->send(st.control, net::failover_atom::value, epoch, st.routing->lost(),
               st.routing->joining());
}

// Brings the worker up to date, step by step: the placement (which answers with its
// control actor), then, when it rejoins, each per-worker dataset (a rebuilt iterator
// starts from the top; one recorded meanwhile is built too). Then it takes closures.
void prepare(Self* self, bool rejoin, size_t step) {
  auto& st = self->state;
  auto failed = current<caf::error&>(self, [=](caf::error& e) {
    if (!rejoin) return lose(self, "bringing it up: " + self->system().render(e));
    drop_connection(self);  // not lost again: it never came back
    recover(self);
  });
  if (step == 0) {
    self->request(st.task.handle, st.config.closure_timeout, net::vars_atom::value, st.placements)
        .then(current<caf::actor&>(self,
                                   [=](caf::actor& control) {
                                     self->state.control = std::move(control);
                                     tell_routing(self);
                                     prepare(self, rejoin, 1);
                                   }),
              failed);
  } else if (rejoin && step <= st.datasets.size() && st.datasets[step - 1].empty()) {
    prepare(self, rejoin, step + 1);  // forgotten
  } else if (rejoin && step <= st.datasets.size()) {
    self->request(st.task.handle, st.config.closure_timeout, net::dataset_atom::value,
                  st.datasets[step - 1])
        .then(current<caf::ok_atom>(self, [=](caf::ok_atom) { prepare(self, rejoin, step + 1); }),
              failed);
  } else {
    self->become(running(self));
    self->send(st.coordinator, chief::ready_atom::value, st.index);
  }
}

void try_rejoin(Self* self) {
  reach_task(self, self->state.task, std::chrono::seconds(2),
             current<caf::actor>(self,
                                 [=](caf::actor found) {
                                   auto& st = self->state;
                                   st.task.handle = std::move(found);
                                   ++st.connection;
                                   st.answered = false;
                                   self->monitor(st.task.handle);
                                   self->become(preparing(self, /*rejoin=*/true));
                                   prepare(self, /*rejoin=*/true, 0);
                                 }),
             current<>(self, [=] { recover(self); }));
}

void send_closure(Self* self, net::ClosureMsg& c) {
  auto& st = self->state;
  const uint64_t id = c.id;
  // No CAF timeout on this request: its bound is closure_timeout counted from when the
  // worker starts the closure (the tick), and a worker that dies or stops answering
  // heartbeats is lost by its down message.
  self->request(st.task.handle, caf::infinite, net::run_atom::value, c)
      .then(current<std::vector<char>&>(self,
                                        [=](std::vector<char>& bytes) {
                                          auto it = find_in_flight(self, id);
                                          if (it == self->state.in_flight.end()) return;
                                          const bool cancelled = it->cancelled;
                                          self->state.in_flight.erase(it);
                                          answered(self);
                                          time_head(self);
                                          // The coordinator hears of the progress before
                                          // the caller sees the result: what the caller
                                          // schedules next comes after it.
                                          self->send(self->state.coordinator,
                                                     chief::done_atom::value, self->state.index,
                                                     id);
                                          if (!cancelled)
                                            self->state.book->complete(id, std::move(bytes));
                                        }),
            current<caf::error&>(self, [=](caf::error& err) {
              auto& s = self->state;
              auto it = find_in_flight(self, id);
              if (it == s.in_flight.end()) return;
              // CAF's own error: the worker is unreachable or gone; its closures run elsewhere.
              if (!chief::is_application_error(err))
                return lose(self,
                            "closure " + std::to_string(id) + ": " + self->system().render(err));
              net::ClosureMsg closure = std::move(it->closure);
              const bool cancelled = it->cancelled;
              s.in_flight.erase(it);
              answered(self);
              time_head(self);
              if (cancelled) {
                // Its RemoteValue already says cancelled; the worker has let go of it.
                self->send(s.coordinator, chief::done_atom::value, s.index, id);
              } else {
                self->send(s.coordinator, chief::failed_atom::value, s.index, std::move(closure),
                           std::move(err));
              }
            }));
  st.in_flight.push_back({std::move(c), {}, false});
  time_head(self);
}

// The coordinator settled every closure up to `through` cancelled: a closure waiting in
// the worker's mailbox is dropped unrun, a running step sees StepContext::cancelled().
void cancel_through(Self* self, uint64_t through) {
  auto& st = self->state;
  bool told = false;
  for (auto& f : st.in_flight) {
    if (f.cancelled || f.closure.id > through) continue;
    f.cancelled = true;
    told = true;
  }
  if (told && st.control) self->send(st.control, net::cancel_atom::value, through);
}

// A running closure past closure_timeout: the worker is hung or too slow, and lost.
// The first closure a worker runs on a connection also makes its first requests to every
// PS task, which every other task of a starting job makes too: on a crowded host that
// takes as long as the host's load says, not a fixed time. So it is timed from when it
// started or from the last first closure any worker answered, whichever is later: a worker
// is not lost while others' start-ups still finish, and is lost closure_timeout after they
// stop finishing.
void check_overdue(Self* self) {
  const auto& st = self->state;
  if (st.in_flight.empty() || !st.in_flight.front().started) return;
  auto from = *st.in_flight.front().started;
  if (!st.answered)
    if (auto last = st.book->last_first_closure_answered()) from = std::max(from, *last);
  if (Clock::now() - from < st.config.closure_timeout) return;
  const auto ran = std::chrono::duration_cast<std::chrono::milliseconds>(
      Clock::now() - *st.in_flight.front().started);
  lose(self, "closure " + std::to_string(st.in_flight.front().closure.id) + " ran " +
                 std::to_string(ran.count()) + " ms, past closure_timeout (" +
                 std::to_string(st.config.closure_timeout.count()) + " ms" +
                 (st.answered ? std::string(")")
                              : std::string(" since the last first closure a worker answered)")));
}

caf::behavior running(Self* self) {
  return {
      [=](net::run_atom, net::ClosureMsg& c) { send_closure(self, c); },
      [=](net::dataset_atom, std::string& name) {
        record_dataset(self, name);
        return build_dataset(self, name);
      },
      [=](net::cancel_atom, uint64_t through) { cancel_through(self, through); },
      [=](net::failover_atom) { tell_routing(self); },
      [=](chief::forget_atom, const std::string& name) { forget_dataset(self, name); },
      [=](net::shutdown_atom) { return shut_down(self, /*live=*/true); },
      [=](chief::tick_atom) {
        check_overdue(self);
        tick(self);
      },
      [=](chief::task_down_atom, uint64_t connection) {
        if (connection == self->state.connection) lose(self, "its connection went down");
      },
      [=](chief::rejoin_atom, uint64_t) {},
  };
}

// At start-up (rejoin false) the worker counts as alive while it is brought up: a dataset
// call waits for its build (queued behind the placement in its mailbox), and a failure
// loses it. When it rejoins it is still lost to the coordinator: a dataset call skips it
// (the preparation builds every recorded dataset), and a failure only tries again.
caf::behavior preparing(Self* self, bool rejoin) {
  return {
      [=](net::run_atom, net::ClosureMsg& c) { send_back(self, c); },
      [=](net::dataset_atom, std::string& name) -> caf::result<caf::ok_atom> {
        record_dataset(self, name);
        if (rejoin) return caf::ok_atom::value;
        return build_dataset(self, name);
      },
      [=](net::cancel_atom, uint64_t) {},
      [=](net::failover_atom) { tell_routing(self); },
      [=](chief::forget_atom, const std::string& name) { forget_dataset(self, name); },
      [=](net::shutdown_atom) { return shut_down(self, /*live=*/!rejoin); },
      [=](chief::tick_atom) { tick(self); },
      [=](chief::task_down_atom, uint64_t connection) {
        if (connection != self->state.connection) return;
        if (!rejoin) return lose(self, "its connection went down while it was brought up");
        drop_connection(self);
        recover(self);
      },
      [=](chief::rejoin_atom, uint64_t) {},
  };
}

caf::behavior recovering(Self* self) {
  return {
      [=](net::run_atom, net::ClosureMsg& c) { send_back(self, c); },
      [=](net::dataset_atom, std::string& name) {
        record_dataset(self, name);
        return caf::ok_atom::value;  // skipped: built when the worker rejoins
      },
      [=](net::cancel_atom, uint64_t) {},
      [=](net::failover_atom) {},  // told when it rejoins
      [=](chief::forget_atom, const std::string& name) { forget_dataset(self, name); },
      [=](net::shutdown_atom) { return shut_down(self, /*live=*/false); },
      [=](chief::tick_atom) { tick(self); },
      [=](chief::task_down_atom, uint64_t) {},
      [=](chief::rejoin_atom, uint64_t connection) {
        if (connection == self->state.connection) try_rejoin(self);
      },
  };
}

caf::behavior worker_proxy(Self* self, caf::actor coordinator, uint64_t index, Endpoint task,
                           std::vector<net::Placement> placements,
                           std::shared_ptr<const PsRouting> routing,
                           std::shared_ptr<ClosureBook> book, CoordinatorConfig config) {
  auto& st = self->state;
  st.index = index;
  st.task = std::move(task);
  st.placements = std::move(placements);
  st.routing = std::move(routing);
  st.coordinator = std::move(coordinator);
  st.book = std::move(book);
  st.config = std::move(config);
  watch_task(self, st.task, st.connection);
  tick(self);
  prepare(self, /*rejoin=*/false, 0);
  return preparing(self, /*rejoin=*/false);
}

}  // namespace

caf::actor spawn_worker_proxy(caf::event_based_actor* coordinator, size_t index, Endpoint task,
                              std::vector<net::Placement> placements,
                              std::shared_ptr<const PsRouting> routing,
                              std::shared_ptr<ClosureBook> book, const CoordinatorConfig& config) {
  return coordinator->spawn<caf::linked>(
      worker_proxy, caf::actor_cast<caf::actor>(coordinator), static_cast<uint64_t>(index),
      std::move(task), std::move(placements), std::move(routing), std::move(book), config);
}

}  // namespace troupe::actors
