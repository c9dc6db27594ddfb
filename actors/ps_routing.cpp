#include "actors/ps_routing.hpp"

#include <algorithm>

namespace troupe::actors {
namespace {

bool holds(const std::vector<int32_t>& sorted, int32_t t) {
  return std::binary_search(sorted.begin(), sorted.end(), t);
}
void add(std::vector<int32_t>& sorted, int32_t t) {
  if (!holds(sorted, t)) sorted.insert(std::upper_bound(sorted.begin(), sorted.end(), t), t);
}
void remove(std::vector<int32_t>& sorted, int32_t t) {
  sorted.erase(std::remove(sorted.begin(), sorted.end(), t), sorted.end());
}
void normalize(std::vector<int32_t>& v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
}

}  // namespace

// The replicas that serve (neither lost nor rejoining), in placement order.
std::vector<int32_t> PsRouting::serving_locked(const net::Placement& p) const {
  std::vector<int32_t> out;
  auto keep = [&](int32_t t) {
    if (!holds(lost_, t) && !holds(joining_, t)) out.push_back(t);
  };
  keep(p.ps_task);
  for (int32_t b : p.backups)
    keep(b);
  return out;
}

std::vector<int32_t> PsRouting::live(const net::Placement& p) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto out = serving_locked(p);
  if (out.empty()) return out;  // nothing to catch up from: a rejoining copy takes nothing
  auto rejoining = [&](int32_t t) {
    if (holds(joining_, t)) out.push_back(t);
  };
  rejoining(p.ps_task);
  for (int32_t b : p.backups)
    rejoining(b);
  return out;
}

int32_t PsRouting::primary(const net::Placement& p) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (lost_.empty() && joining_.empty()) return p.ps_task;
  auto l = serving_locked(p);
  return l.empty() ? -1 : l.front();
}

uint64_t PsRouting::epoch() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return epoch_;
}

std::vector<int32_t> PsRouting::lost() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return lost_;
}

std::vector<int32_t> PsRouting::joining() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return joining_;
}

bool PsRouting::is_lost(int32_t task) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return holds(lost_, task);
}

bool PsRouting::is_joining(int32_t task) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return holds(joining_, task);
}

bool PsRouting::wait_past(uint64_t epoch, std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(mutex_);
  return moved_.wait_for(lock, timeout, [&] { return epoch_ > epoch; });
}

bool PsRouting::update(uint64_t epoch, std::vector<int32_t> lost, std::vector<int32_t> joining) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (epoch <= epoch_) return false;
  normalize(lost);
  normalize(joining);
  for (int32_t t : lost)
    remove(joining, t);
  epoch_ = epoch;
  lost_ = std::move(lost);
  joining_ = std::move(joining);
  moved_.notify_all();
  return true;
}

bool PsRouting::fail_over(int32_t task, const std::vector<net::Placement>& placements) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (holds(lost_, task)) return false;
  if (!holds(joining_, task)) {
    for (const auto& p : placements) {
      auto l = serving_locked(p);
      if (l.size() == 1 && l.front() == task) return false;  // its last serving replica
    }
  }
  remove(joining_, task);
  add(lost_, task);
  ++epoch_;
  moved_.notify_all();
  return true;
}

bool PsRouting::begin_rejoin(int32_t task) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!holds(lost_, task)) return false;
  remove(lost_, task);
  add(joining_, task);
  ++epoch_;
  moved_.notify_all();
  return true;
}

bool PsRouting::finish_rejoin(int32_t task) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!holds(joining_, task)) return false;
  remove(joining_, task);
  ++epoch_;
  moved_.notify_all();
  return true;
}

int64_t PsRouting::under_replicated(const std::vector<net::Placement>& placements,
                                    int replicas) const {
  std::lock_guard<std::mutex> lock(mutex_);
  int64_t n = 0;
  for (const auto& p : placements)
    if (static_cast<int>(serving_locked(p).size()) < replicas) ++n;
  return n;
}

int replica_count(const std::vector<net::Placement>& placements) {
  return placements.empty() ? 1 : 1 + static_cast<int>(placements.front().backups.size());
}

}  // namespace troupe::actors
