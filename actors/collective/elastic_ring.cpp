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

namespace {

// A connection to slot `to` once it has proved the job's secret (and this slot too); a
// failure is named on stderr and tried again like an unreachable slot.
core::Expected<net::Socket> proved(net::Socket s, const std::string& secret, int me, int to,
                                   const std::string& address) {
  if (auto st = net::prove_membership(s, secret, std::chrono::milliseconds(5000)); !st) {
    std::fprintf(stderr, "troupe elastic ring: slot %d: slot %d at %s: %s\n", me, to,
                 address.c_str(), st.error().message.c_str());
    return st.error();
  }
  return s;
}

constexpr uint32_t knock_magic = 0x31455254;  // "TRE1": first bytes at a slot's door
constexpr uint32_t plan_magic = 0x31505254;   // "TRP1": slot 0's plan for a generation
constexpr int32_t max_slots = 4096;

enum Kind : uint32_t { join_kind = 1, reform_kind = 2, link_kind = 3 };

struct Knock {
  uint32_t magic = knock_magic;
  uint32_t kind = 0;
  uint64_t group = 0;
  uint64_t generation = 0;
  int64_t step = 0;
  int32_t slot = 0;
  int32_t has_state = 0;
};
static_assert(sizeof(Knock) == 40, "packed by layout");

struct PlanHead {
  uint32_t magic = plan_magic;
  int32_t count = 0;  // members; -1: the job cannot go on (message follows)
  uint64_t generation = 0;
  int64_t step = 0;
  int32_t root_slot = 0;
  // count == -1: the reason's length; otherwise how many slots follow the members'
  // (slots whose process was replaced: lost and joined again between two plans)
  int32_t text_bytes = 0;
};
static_assert(sizeof(PlanHead) == 32, "packed by layout");

std::string slots_text(const std::vector<int>& slots) {
  std::string s;
  for (int x : slots)
    s += (s.empty() ? "" : ", ") + std::to_string(x);
  return s;
}

milliseconds left_until(clock_type::time_point deadline) {
  return std::max(milliseconds(0),
                  std::chrono::duration_cast<milliseconds>(deadline - clock_type::now()));
}

}  // namespace

struct ElasticRing::Pending {
  net::Socket socket;
  Knock knock;
};

ElasticRing::ElasticRing(int slot, std::vector<std::string> addresses, ElasticOptions options)
    : slot_(slot), addresses_(std::move(addresses)), options_(options) {}

ElasticRing::~ElasticRing() {
  stopping_ = true;
  if (acceptor_.joinable()) acceptor_.join();
}

core::Expected<std::unique_ptr<ElasticRing>> ElasticRing::join(int slot,
                                                               std::vector<std::string> addresses,
                                                               ElasticOptions options, int64_t step,
                                                               bool has_state) {
  const int n = static_cast<int>(addresses.size());
  if (n < 1 || n > max_slots || slot < 0 || slot >= n)
    return make_error(Errc::invalid_argument, "elastic ring: slot " + std::to_string(slot) +
                                                  " of " + std::to_string(n) + " slots");
  std::unique_ptr<ElasticRing> g(new ElasticRing(slot, std::move(addresses), options));
  auto me = net::parse_host_port(g->addresses_[static_cast<size_t>(slot)]);
  if (!me) return me.error();
  uint16_t port = me->port;
  auto listener = net::listen_on(net::bind_host(me->host), port);
  if (!listener) return listener.error();
  g->listener_ = std::move(*listener);
  g->acceptor_ = std::thread([p = g.get()] { p->accept_loop(); });

  const auto wait = options.ring.connect_timeout;
  core::Expected<Membership> m = make_error(Errc::internal, "not formed");
  if (slot == 0) {
    std::vector<int> everyone;
    for (int s = 1; s < n; ++s)
      everyone.push_back(s);
    m = g->lead(0, everyone, step, has_state, wait, /*admit=*/true);
  } else {
    // Knock at slot 0 (it may not be up yet), then wait for the plan: the first
    // generation's, or, when the job runs, the next one's (at its next step boundary).
    auto leader = net::parse_host_port(g->addresses_[0]);
    if (!leader) return leader.error();
    const auto deadline = clock_type::now() + wait;
    for (;;) {
      auto s = net::connect_to(leader->host, leader->port, milliseconds(0));
      if (s) s = proved(std::move(*s), options.ring.secret, slot, 0, g->addresses_[0]);
      if (s) {
        Knock k;
        k.kind = join_kind;
        k.group = options.ring.group_id;
        k.step = step;
        k.slot = slot;
        k.has_state = has_state ? 1 : 0;
        if (detail::write_all(*s, &k, sizeof k)) {
          g->control_ = std::move(*s);
          break;
        }
      }
      if (clock_type::now() >= deadline)
        return make_error(Errc::unavailable, "elastic ring: slot " + std::to_string(slot) +
                                                 " could not reach slot 0 at " + g->addresses_[0]);
      std::this_thread::sleep_for(milliseconds(20));  // slot 0 is starting
    }
    m = g->follow(wait + options.rejoin_timeout);
  }
  if (!m) return m.error();
  if (auto st = g->link(*m); !st) return st.error();
  return g;
}

void ElasticRing::accept_loop() {
  while (!stopping_) {
    pollfd p{listener_.fd(), POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    std::string peer;
    auto s = net::accept_on(listener_, peer);
    if (!s) continue;
    if (auto st = net::admit_member(*s, options_.ring.secret, milliseconds(2000)); !st) {
      std::fprintf(stderr, "troupe elastic ring: slot %d refused a connection from %s: %s\n", slot_,
                   peer.c_str(), st.error().message.c_str());
      continue;
    }
    auto pending = std::make_unique<Pending>();
    const bool ok = detail::read_within(*s, &pending->knock, sizeof(Knock), milliseconds(2000));
    const Knock& k = pending->knock;
    const bool valid = ok && k.magic == knock_magic && k.group == options_.ring.group_id &&
                       k.slot >= 0 && k.slot < static_cast<int32_t>(addresses_.size()) &&
                       k.slot != slot_ &&
                       (k.kind == link_kind || (k.kind == join_kind && slot_ == 0));
    if (!valid) {
      std::fprintf(stderr,
                   "troupe elastic ring: slot %d refused a connection from %s (not a member "
                   "of this group)\n",
                   slot_, peer.c_str());
      continue;
    }
    pending->socket = std::move(*s);
    std::lock_guard<std::mutex> lock(mu_);
    (k.kind == link_kind ? links_ : joins_).push_back(std::move(pending));
    cv_.notify_all();
  }
}

int ElasticRing::waiting() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(joins_.size());
}

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
    if (open.empty() || clock_type::now() >= deadline) break;
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
  if (!detail::read_within(control_, &h, sizeof h, wait) || h.magic != plan_magic)
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

core::Status ElasticRing::link(const Membership& m) {
  ring_.reset();
  const int n = static_cast<int>(m.slots.size());
  const int p =
      static_cast<int>(std::find(m.slots.begin(), m.slots.end(), slot_) - m.slots.begin());
  membership_ = m;
  rank_ = p;
  if (n == 1) {
    auto r = Ring::from_links(0, 1, {}, {}, options_.ring);
    if (!r) return r.error();
    ring_ = std::move(*r);
    return {};
  }
  const int right = m.slots[static_cast<size_t>((p + 1) % n)];
  const int left = m.slots[static_cast<size_t>((p + n - 1) % n)];
  const auto deadline = clock_type::now() + options_.rejoin_timeout;
  auto hp = net::parse_host_port(addresses_[static_cast<size_t>(right)]);
  if (!hp) return hp.error();
  net::Socket right_socket;
  for (;;) {
    auto s = net::connect_to(hp->host, hp->port, milliseconds(0));
    if (s)
      s = proved(std::move(*s), options_.ring.secret, slot_, right,
                 addresses_[static_cast<size_t>(right)]);
    if (s) {
      Knock k;
      k.kind = link_kind;
      k.group = options_.ring.group_id;
      k.generation = m.generation;
      k.slot = slot_;
      if (detail::write_all(*s, &k, sizeof k)) {
        right_socket = std::move(*s);
        break;
      }
    }
    if (clock_type::now() >= deadline)
      return make_error(Errc::unavailable, "elastic ring: slot " + std::to_string(slot_) +
                                               " could not reach slot " + std::to_string(right) +
                                               " for generation " + std::to_string(m.generation));
    std::this_thread::sleep_for(milliseconds(10));
  }
  net::Socket left_socket;
  {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      for (auto it = links_.begin(); it != links_.end();) {
        const Knock& k = (*it)->knock;
        if (k.generation < m.generation) {  // a link of a ring that no longer is
          it = links_.erase(it);
        } else if (k.generation == m.generation && k.slot == left) {
          left_socket = std::move((*it)->socket);
          links_.erase(it);
          break;
        } else {
          ++it;
        }
      }
      if (left_socket.valid()) break;
      if (clock_type::now() >= deadline)
        return make_error(Errc::unavailable, "elastic ring: slot " + std::to_string(left) +
                                                 " did not link to slot " + std::to_string(slot_) +
                                                 " for generation " + std::to_string(m.generation));
      cv_.wait_for(lock, std::min(milliseconds(50), left_until(deadline)));
    }
  }
  auto r = Ring::from_links(p, n, std::move(left_socket), std::move(right_socket), options_.ring);
  if (!r) return r.error();
  ring_ = std::move(*r);
  return {};
}

core::Expected<Membership> ElasticRing::reform(int64_t step, bool admit) {
  if (ring_) ring_->shut_down();  // whoever still waits on this ring fails at once
  // A member lost between the plan and the linking fails its neighbours' links: then
  // everyone goes round again (a few times) with what is left.
  core::Status linked;
  for (int attempt = 0; attempt < 3; ++attempt) {
    const uint64_t next = membership_.generation + 1;
    core::Expected<Membership> m = make_error(Errc::internal, "not formed");
    if (slot_ == 0) {
      std::vector<int> expected;
      for (int s : membership_.slots)
        if (s != 0) expected.push_back(s);
      m = lead(next, expected, step, /*has_state=*/true, options_.rejoin_timeout, admit);
    } else {
      Knock k;
      k.kind = reform_kind;
      k.group = options_.ring.group_id;
      k.generation = next;
      k.step = step;
      k.slot = slot_;
      k.has_state = 1;
      if (!control_.valid() || !detail::write_all(control_, &k, sizeof k))
        return make_error(Errc::unavailable, "elastic ring: slot 0 at " + addresses_[0] +
                                                 " is gone (elastic mode needs slot 0)");
      m = follow(options_.rejoin_timeout * 2 + milliseconds(2000));
    }
    if (!m) return m.error();
    linked = link(*m);
    if (linked.ok()) return membership_;
  }
  return linked.error();
}

}  // namespace troupe::collective
