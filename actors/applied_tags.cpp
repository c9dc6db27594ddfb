#include "actors/applied_tags.hpp"

#include <algorithm>

#include "net/wire.hpp"

namespace troupe::actors {

AppliedTags::Window& AppliedTags::window(uint32_t incarnation) {
  auto [it, fresh] = windows_.try_emplace(incarnation);
  it->second.last_use = ++uses_;
  if (fresh && windows_.size() > max_incarnations) {
    auto oldest = std::min_element(
        windows_.begin(), windows_.end(),
        [](const auto& a, const auto& b) { return a.second.last_use < b.second.last_use; });
    windows_.erase(oldest);
  }
  return it->second;
}

void AppliedTags::settle(uint64_t tag, uint64_t settled_below) {
  const uint64_t closure = net::tag_closure(tag);
  if (settled_below == 0 || settled_below > closure || (settled_below >> 32) != (closure >> 32))
    return;
  Window& w = window(net::tag_incarnation(tag));
  if (settled_below <= w.settled_below) return;
  w.settled_below = settled_below;
  w.tags.erase(w.tags.begin(), w.tags.lower_bound(settled_below << 16));
}

bool AppliedTags::fresh(uint64_t tag) const {
  auto it = windows_.find(net::tag_incarnation(tag));
  if (it == windows_.end()) return true;
  return net::tag_closure(tag) >= it->second.settled_below && it->second.tags.count(tag) == 0;
}

void AppliedTags::insert(uint64_t tag) {
  window(net::tag_incarnation(tag)).tags.insert(tag);
}

size_t AppliedTags::size() const {
  size_t n = 0;
  for (const auto& [inc, w] : windows_)
    n += w.tags.size();
  return n;
}

std::vector<int64_t> AppliedTags::to_ints() const {
  std::vector<int64_t> out;
  for (const auto& [inc, w] : windows_) {
    out.push_back(inc);
    out.push_back(static_cast<int64_t>(w.settled_below));
    out.push_back(static_cast<int64_t>(w.tags.size()));
    for (uint64_t t : w.tags)
      out.push_back(static_cast<int64_t>(t));
  }
  return out;
}

core::Expected<AppliedTags> AppliedTags::from_ints(const std::vector<int64_t>& ints) {
  AppliedTags a;
  auto bad = [] {
    return core::make_error(core::Errc::data_loss, "malformed applied closure tags");
  };
  for (size_t i = 0; i < ints.size();) {
    if (ints.size() - i < 3 || ints[i] < 0 || ints[i] > 0xffff || ints[i + 2] < 0 ||
        static_cast<uint64_t>(ints[i + 2]) > ints.size() - i - 3)
      return bad();
    Window& w = a.window(static_cast<uint32_t>(ints[i]));
    w.settled_below = static_cast<uint64_t>(ints[i + 1]);
    const auto n = static_cast<size_t>(ints[i + 2]);
    for (size_t k = 0; k < n; ++k)
      w.tags.insert(static_cast<uint64_t>(ints[i + 3 + k]));
    i += 3 + n;
  }
  return a;
}

}  // namespace troupe::actors
