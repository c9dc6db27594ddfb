#include "actors/ps_routing.hpp"

#include <algorithm>

namespace troupe::actors {

std::vector<int32_t> PsRouting::live_locked(const net::Placement& p) const {
  std::vector<int32_t> out;
  auto keep = [&](int32_t t) {
    if (!std::binary_search(lost_.begin(), lost_.end(), t)) out.push_back(t);
  };
  keep(p.ps_task);
  for (int32_t b : p.backups)
    keep(b);
  return out;
}

std::vector<int32_t> PsRouting::live(const net::Placement& p) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return live_locked(p);
}

int32_t PsRouting::primary(const net::Placement& p) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (lost_.empty()) return p.ps_task;
  auto l = live_locked(p);
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

bool PsRouting::is_lost(int32_t task) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return std::binary_search(lost_.begin(), lost_.end(), task);
}

bool PsRouting::update(uint64_t epoch, std::vector<int32_t> lost) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (epoch <= epoch_) return false;
  std::sort(lost.begin(), lost.end());
  lost.erase(std::unique(lost.begin(), lost.end()), lost.end());
  epoch_ = epoch;
  lost_ = std::move(lost);
  return true;
}

bool PsRouting::fail_over(int32_t task, const std::vector<net::Placement>& placements) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (std::binary_search(lost_.begin(), lost_.end(), task)) return false;
  for (const auto& p : placements) {
    auto l = live_locked(p);
    if (l.size() == 1 && l.front() == task) return false;  // its last replica
  }
  lost_.insert(std::upper_bound(lost_.begin(), lost_.end(), task), task);
  ++epoch_;
  return true;
}

int64_t PsRouting::under_replicated(const std::vector<net::Placement>& placements,
                                    int replicas) const {
  std::lock_guard<std::mutex> lock(mutex_);
  int64_t n = 0;
  for (const auto& p : placements)
    if (static_cast<int>(live_locked(p).size()) < replicas) ++n;
  return n;
}

int replica_count(const std::vector<net::Placement>& placements) {
  return placements.empty() ? 1 : 1 + static_cast<int>(placements.front().backups.size());
}

}  // namespace troupe::actors
