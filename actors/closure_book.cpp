// The ClosureBook (what the user's thread and the coordinator actor share), the watchdog's
// report text, and the dispatch policy: plain code, no actor.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <random>
#include <sstream>

#include "actors/closure_book.hpp"

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

uint32_t fresh_incarnation() {
  static std::atomic<uint32_t> next{[] {
    std::random_device rd;
    return static_cast<uint32_t>(
        rd() ^ (static_cast<uint32_t>(::getpid()) << 8) ^
        static_cast<uint32_t>(std::chrono::system_clock::now().time_since_epoch().count()));
  }()};
  return next.fetch_add(1) % 0x7fffu + 1;
}

ClosureBook::ClosureBook(uint32_t incarnation, size_t max_pending)
    : incarnation_((incarnation == 0 ? fresh_incarnation() : incarnation) & 0x7fffu),
      next_id_((uint64_t{incarnation_} << 32) + 1),
      max_pending_(max_pending) {}

core::Expected<uint64_t> ClosureBook::add(std::shared_ptr<detail::RemoteState> state) {
  std::unique_lock<std::mutex> lock(mu_);
  if (max_pending_ > 0)
    cv_.wait(lock, [&] { return pending_.size() < max_pending_ || first_error_; });
  if (first_error_) return *first_error_;
  const uint64_t id = next_id_++;
  pending_.emplace(id, std::move(state));
  ++counters_.scheduled;
  return id;
}

uint64_t ClosureBook::settled_below() {
  std::lock_guard<std::mutex> lock(mu_);
  return pending_.empty() ? next_id_ : pending_.begin()->first;
}

uint64_t ClosureBook::error_through() {
  std::lock_guard<std::mutex> lock(mu_);
  return error_through_.value_or(next_id_ - 1);
}

void ClosureBook::keep_error_locked(const core::Error& error) {
  if (first_error_) return;
  first_error_ = error;
  error_through_ = next_id_ - 1;
}

void ClosureBook::abandon(const core::Error& why) {
  std::lock_guard<std::mutex> lock(mu_);
  counters_.cancelled += static_cast<int64_t>(pending_.size());
  for (auto& [id, state] : pending_)
    state->settle(Status::cancelled, {}, why);
  pending_.clear();
  cv_.notify_all();
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
  keep_error_locked(error);
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

void ClosureBook::worker_lost(uint64_t worker) {
  const auto now = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::system_clock::now().time_since_epoch());
  std::lock_guard<std::mutex> lock(mu_);
  ++counters_.workers_lost;
  if (counters_.worker_losses.size() < 10000)
    counters_.worker_losses.push_back({static_cast<int64_t>(worker), now.count()});
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

void ClosureBook::ps_reconnected() {
  std::lock_guard<std::mutex> lock(mu_);
  ++counters_.ps_reconnects;
  cv_.notify_all();
}

void ClosureBook::ps_failed_over(int64_t under_replicated) {
  std::lock_guard<std::mutex> lock(mu_);
  ++counters_.ps_failovers;
  counters_.under_replicated_shards = under_replicated;
  cv_.notify_all();
}

void ClosureBook::replicas_rebuilt(int64_t shards, int64_t under_replicated) {
  std::lock_guard<std::mutex> lock(mu_);
  counters_.replicas_rebuilt += shards;
  counters_.under_replicated_shards = under_replicated;
  cv_.notify_all();
}

void ClosureBook::first_closure_answered() {
  std::lock_guard<std::mutex> lock(mu_);
  first_answered_ = std::chrono::steady_clock::now();
}

std::optional<std::chrono::steady_clock::time_point> ClosureBook::last_first_closure_answered() {
  std::lock_guard<std::mutex> lock(mu_);
  return first_answered_;
}

void ClosureBook::progress_gap(std::chrono::milliseconds gap) {
  std::lock_guard<std::mutex> lock(mu_);
  counters_.longest_stall_ms = std::max<int64_t>(counters_.longest_stall_ms, gap.count());
}

void ClosureBook::watchdog_fired() {
  std::lock_guard<std::mutex> lock(mu_);
  ++counters_.watchdog_reports;
  cv_.notify_all();
}

void ClosureBook::ps_snapshots(size_t task, int64_t failures, int64_t age_ms) {
  std::lock_guard<std::mutex> lock(mu_);
  ps_snapshots_[task] = {failures, age_ms};
  counters_.snapshot_failures = 0;
  counters_.snapshot_age_ms = 0;
  for (const auto& [t, f] : ps_snapshots_) {
    counters_.snapshot_failures += f.first;
    if (f.second < 0 || counters_.snapshot_age_ms < 0)
      counters_.snapshot_age_ms = -1;
    else
      counters_.snapshot_age_ms = std::max(counters_.snapshot_age_ms, f.second);
  }
  cv_.notify_all();
}

void ClosureBook::abort(const core::Error& error) {
  std::lock_guard<std::mutex> lock(mu_);
  keep_error_locked(error);
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

bool ClosureBook::wait_done(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, timeout, [&] { return pending_.empty(); });
}

bool ClosureBook::done() {
  std::lock_guard<std::mutex> lock(mu_);
  return pending_.empty();
}

bool ClosureBook::pending(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  return pending_.count(id) > 0;
}

ClosureBook::Counters ClosureBook::counters() {
  std::lock_guard<std::mutex> lock(mu_);
  return counters_;
}

size_t pick_worker(const std::vector<WorkerLoad>& workers, size_t after, size_t max_in_flight) {
  const size_t n = workers.size();
  // An idle worker first (round robin from the last chosen, so closures arriving one at a
  // time spread over every worker).
  for (size_t k = 1; k <= n; ++k) {
    const size_t w = (after + k) % n;
    if (workers[w].ready && workers[w].in_flight == 0) return w;
  }
  // Sending ahead only when no live worker is idle or still being brought up to date: a
  // closure must not wait in a busy worker's mailbox while another worker could take it.
  for (const auto& l : workers)
    if (l.alive && (!l.ready || l.in_flight == 0)) return n;
  size_t best = n;
  for (size_t k = 1; k <= n; ++k) {
    const size_t w = (after + k) % n;
    if (!workers[w].ready || workers[w].in_flight >= max_in_flight) continue;
    if (best == n || workers[w].in_flight < workers[best].in_flight) best = w;
  }
  return best;
}

}  // namespace troupe::actors
