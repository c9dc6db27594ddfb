#include "actors/coordinator.hpp"

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

void dispatch(Self* self);

// Marks a worker lost (once) and puts its in-flight closures back at the front of the queue.
void requeue(Self* self, size_t w) {
  auto& slot = self->state.workers[w];
  if (slot.alive) self->state.book->worker_lost();
  slot.alive = false;
  // Newest first to the front, so the oldest ends up first in the queue.
  for (auto it = slot.in_flight.rbegin(); it != slot.in_flight.rend(); ++it) {
    self->state.queue.push_front(std::move(it->second));
    self->state.book->retried();
  }
  slot.in_flight.clear();
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

void send_closure(Self* self, size_t w) {
  net::ClosureMsg c = std::move(self->state.queue.front());
  self->state.queue.pop_front();
  const uint64_t id = c.id;
  auto& slot = self->state.workers[w];
  self->request(slot.handle, self->state.closure_timeout, net::run_atom::value, c)
      .then(
          [=](std::vector<char>& bytes) {
            auto& s = self->state.workers[w];
            if (s.in_flight.erase(id) == 0) return;  // already put back and run elsewhere
            self->state.book->complete(id, std::move(bytes));
            dispatch(self);
          },
          [=](caf::error& err) {
            auto& s = self->state.workers[w];
            if (s.in_flight.count(id) == 0) return;
            const core::Error e = net::from_caf(err);
            if (is_application_error(err)) {
              s.in_flight.erase(id);
              self->state.book->fail(id, e);
              cancel_queued(self, e);
            } else {
              // The worker is unreachable or too slow: its closures run elsewhere.
              requeue(self, w);
            }
            dispatch(self);
          });
  slot.in_flight.emplace(id, std::move(c));
}

void dispatch(Self* self) {
  auto& st = self->state;
  // Round-robin one closure at a time, so that work spreads over all idle workers first.
  bool sent = true;
  while (sent && !st.queue.empty()) {
    sent = false;
    for (size_t w = 0; w < st.workers.size() && !st.queue.empty(); ++w) {
      auto& slot = st.workers[w];
      if (slot.ready && slot.alive && slot.in_flight.size() < st.max_in_flight) {
        send_closure(self, w);
        sent = true;
      }
    }
  }
}

}  // namespace

caf::behavior coordinator(Self* self, std::vector<caf::actor> workers,
                          std::vector<net::Placement> placements, std::shared_ptr<ClosureBook> book,
                          std::chrono::milliseconds closure_timeout, size_t max_in_flight) {
  self->state.book = std::move(book);
  self->state.placements = std::move(placements);
  self->state.closure_timeout = closure_timeout;
  self->state.max_in_flight = std::max<size_t>(1, max_in_flight);
  for (auto& h : workers) {
    CoordinatorState::Worker slot;
    slot.handle = h;
    self->state.workers.push_back(std::move(slot));
    self->monitor(h);
  }
  self->set_down_handler([=](caf::down_msg& dm) {
    for (size_t w = 0; w < self->state.workers.size(); ++w) {
      if (self->state.workers[w].handle.address() != dm.source) continue;
      requeue(self, w);
    }
    dispatch(self);
  });
  for (size_t w = 0; w < self->state.workers.size(); ++w) {
    self->request(self->state.workers[w].handle, closure_timeout, net::vars_atom::value,
                  self->state.placements)
        .then(
            [=](caf::ok_atom) {
              self->state.workers[w].ready = true;
              dispatch(self);
            },
            [=](caf::error&) { requeue(self, w); });
  }
  return {
      [=](net::run_atom, net::ClosureMsg& c) {
        self->state.queue.push_back(std::move(c));
        dispatch(self);
      },
  };
}

}  // namespace troupe::actors
