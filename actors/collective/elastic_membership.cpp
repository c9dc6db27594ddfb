// The elastic ring's membership: slot 0 leads each generation (waits for the slots it
// expects, decides members, root and step, and sends the plan); the other slots follow
// the plan it sends. Linking the ring the plan describes is in elastic_ring.cpp.
#include "actors/collective/elastic_frames.hpp"
#include "actors/collective/elastic_ring.hpp"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <set>

#include "actors/collective/socket_io.hpp"
#include "net/auth.hpp"
#include "net/cluster_spec.hpp"

namespace troupe::collective {

using core::Errc;
using core::make_error;
using clock_type = std::chrono::steady_clock;
using std::chrono::milliseconds;
using namespace elastic_detail;

core::Expected<Membership> ElasticRing::lead(uint64_t generation, std::vector<int> expected,
                                             int64_t step, bool has_state, milliseconds wait,
                                             bool admit) {
  struct Report {
    int64_t step = 0;
    bool has_state = false;
  };
  std::map<int, Report> alive;
  std::set<int> gone, fresh;  // fresh: slots whose (new) process knocked to join
  const auto deadline = clock_type::now() + wait;
  auto unresolved = [&] {
    std::vector<int> out;
    for (int s : expected)
      if (!alive.count(s) && !gone.count(s)) out.push_back(s);
    return out;
  };
  for (;;) {
    if (admit) {  // Processes knocking to join: new ones, or members back as new processes.
      std::lock_guard<std::mutex> lock(mu_);
      while (!joins_.empty()) {
        auto p = std::move(joins_.front());
        joins_.pop_front();
        controls_[p->knock.slot] = std::move(p->socket);  // replaces a dead process's
        alive[p->knock.slot] = {p->knock.step, p->knock.has_state != 0};
        gone.erase(p->knock.slot);
        fresh.insert(p->knock.slot);
      }
    }
    const auto open = unresolved();
    if (open.empty() || clock_type::now() >= deadline || stopped()) break;
    // Members report on their connection to slot 0, or their connection ends (killed).
    std::vector<pollfd> fds;
    std::vector<int> owners;
    for (int s : open)
      if (auto it = controls_.find(s); it != controls_.end()) {
        fds.push_back({it->second.fd(), POLLIN, 0});
        owners.push_back(s);
      }
    if (fds.empty()) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, std::min(milliseconds(50), left_until(deadline)),
                   [&] { return admit && !joins_.empty(); });
      continue;
    }
    bool tls_buffered = false;  // decrypted bytes the sockets no longer show
    for (size_t i = 0; i < fds.size(); ++i)
      if (net::buffered(controls_[owners[i]]) > 0) {
        fds[i].revents = POLLIN;
        tls_buffered = true;
      }
    if (!tls_buffered &&
        ::poll(fds.data(), fds.size(),
               static_cast<int>(std::min(milliseconds(20), left_until(deadline)).count())) <= 0)
      continue;
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      const int s = owners[i];
      Knock k;
      if (detail::read_within(controls_[s], &k, sizeof k, milliseconds(1000)) &&
          k.magic == knock_magic && k.kind == reform_kind && k.slot == s) {
        alive[s] = {k.step, k.has_state != 0};
      } else {
        gone.insert(s);
        controls_.erase(s);
      }
    }
  }
  // Those who came are told why the job cannot go on, instead of timing out themselves.
  auto refuse = [&](const std::string& why) {
    PlanHead h;
    h.count = -1;
    h.generation = generation;
    h.text_bytes = static_cast<int32_t>(why.size());
    for (auto& [s, sock] : controls_) {
      detail::write_all(sock, &h, sizeof h);
      detail::write_all(sock, why.data(), why.size());
    }
    controls_.clear();
    return make_error(Errc::unavailable, why);
  };
  if (!unresolved().empty() && stopped()) {
    {  // those whose knocks came since the loop's last look are told too
      std::lock_guard<std::mutex> lock(mu_);
      for (; !joins_.empty(); joins_.pop_front())
        controls_[joins_.front()->knock.slot] = std::move(joins_.front()->socket);
    }
    refuse("elastic ring: slot 0 stopped while the ring formed");
    return stopped_error();
  }
  if (generation == 0 && !unresolved().empty())
    return refuse("elastic ring: slots " + slots_text(unresolved()) + " did not join within " +
                  std::to_string(wait.count()) + " ms");
  for (int s : unresolved()) {  // stopped, or too slow: the job goes on without them
    gone.insert(s);
    controls_.erase(s);
  }

  Membership m;
  m.generation = generation;
  m.slots.push_back(0);
  for (const auto& [s, r] : alive)
    m.slots.push_back(s);
  // The state to carry on from: the member with the most steps done (a rank that
  // finished the step the others failed holds a complete, later update), then the lowest.
  int64_t best = has_state ? step : -1;
  int root_slot = 0;
  for (const auto& [s, r] : alive)
    if (r.has_state && r.step > best) {
      best = r.step;
      root_slot = s;
    }
  m.step = best < 0 ? 0 : best;
  m.root = static_cast<int>(std::find(m.slots.begin(), m.slots.end(), root_slot) - m.slots.begin());
  // A member whose process died and came back before this plan is both lost and joined.
  std::vector<int32_t> replaced;
  for (int s : membership_.slots)
    if (fresh.count(s) && std::count(m.slots.begin(), m.slots.end(), s)) replaced.push_back(s);
  note_changes(m, replaced);

  if (static_cast<int>(m.slots.size()) < options_.min_ranks)
    return refuse("elastic ring: " + std::to_string(m.slots.size()) + " ranks left (slots " +
                  slots_text(m.slots) + "; lost " + slots_text(m.lost) +
                  "), fewer than the minimum of " + std::to_string(options_.min_ranks));
  PlanHead h;
  h.count = static_cast<int32_t>(m.slots.size());
  h.generation = generation;
  h.step = m.step;
  h.root_slot = root_slot;
  h.text_bytes = static_cast<int32_t>(replaced.size());
  std::vector<int32_t> body(m.slots.begin(), m.slots.end());
  body.insert(body.end(), replaced.begin(), replaced.end());
  for (auto it = controls_.begin(); it != controls_.end();) {
    if (!std::count(m.slots.begin(), m.slots.end(), it->first)) {
      it = controls_.erase(it);
      continue;
    }
    // A member that cannot be told fails to link; its neighbours then re-form again.
    detail::write_all(it->second, &h, sizeof h);
    detail::write_all(it->second, body.data(), body.size() * sizeof(int32_t));
    ++it;
  }
  return m;
}

core::Expected<Membership> ElasticRing::follow(milliseconds wait) {
  PlanHead h;
  const bool heard = detail::read_within(control_, &h, sizeof h, wait, options_.stop);
  if (!heard && stopped()) return stopped_error();
  if (!heard || h.magic != plan_magic)
    return make_error(Errc::unavailable, "elastic ring: slot " + std::to_string(slot_) +
                                             " heard no plan from slot 0 at " + addresses_[0] +
                                             " (gone: elastic mode needs slot 0)");
  if (h.count == -1) {
    std::string why(static_cast<size_t>(std::clamp(h.text_bytes, 0, 4096)), '\0');
    detail::read_within(control_, why.data(), why.size(), milliseconds(1000));
    return make_error(Errc::unavailable, why);
  }
  if (h.count < 1 || h.count > static_cast<int32_t>(addresses_.size()))
    return make_error(Errc::data_loss, "elastic ring: a malformed plan from slot 0 (" +
                                           std::to_string(h.count) + " members)");
  if (h.text_bytes < 0 || h.text_bytes > h.count)
    return make_error(Errc::data_loss, "elastic ring: a malformed plan from slot 0 (" +
                                           std::to_string(h.text_bytes) + " replaced of " +
                                           std::to_string(h.count) + ")");
  std::vector<int32_t> body(static_cast<size_t>(h.count + h.text_bytes));
  if (!detail::read_within(control_, body.data(), body.size() * sizeof(int32_t),
                           milliseconds(2000)))
    return make_error(Errc::unavailable, "elastic ring: slot 0's plan was cut off");
  Membership m;
  m.generation = h.generation;
  m.step = h.step;
  for (int32_t s : body)
    if (s < 0 || s >= static_cast<int32_t>(addresses_.size()))
      return make_error(Errc::data_loss,
                        "elastic ring: slot 0's plan names slot " + std::to_string(s));
  m.slots.assign(body.begin(), body.begin() + h.count);
  const std::vector<int32_t> replaced(body.begin() + h.count, body.end());
  m.root =
      static_cast<int>(std::find(m.slots.begin(), m.slots.end(), h.root_slot) - m.slots.begin());
  if (m.root >= static_cast<int>(m.slots.size()) ||
      !std::count(m.slots.begin(), m.slots.end(), slot_))
    return make_error(Errc::data_loss,
                      "elastic ring: slot 0's plan does not hold its root or "
                      "slot " +
                          std::to_string(slot_));
  note_changes(m, replaced);
  return m;
}

void ElasticRing::note_changes(Membership& m, const std::vector<int32_t>& replaced) const {
  const auto& before = membership_.slots;
  auto has = [](const std::vector<int>& v, int s) { return std::count(v.begin(), v.end(), s) > 0; };
  auto was_replaced = [&](int s) { return std::count(replaced.begin(), replaced.end(), s) > 0; };
  for (int s : before)
    if (!has(m.slots, s) || was_replaced(s)) m.lost.push_back(s);
  for (int s : m.slots)
    if (!before.empty() && (!has(before, s) || was_replaced(s))) m.joined.push_back(s);
}

}  // namespace troupe::collective
