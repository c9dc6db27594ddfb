// The elastic ring's slots: joining (knocking at slot 0), accepting knocks, linking a
// generation's ring and re-forming it. Slot 0's plans and the others' following them are
// in elastic_membership.cpp.
#include "actors/collective/elastic_ring.hpp"
#include "actors/collective/elastic_frames.hpp"

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

ElasticRing::ElasticRing(int slot, std::vector<std::string> addresses, ElasticOptions options)
    : slot_(slot), addresses_(std::move(addresses)), options_(options) {
  // Every generation's ring records its collectives here (the status knocks read it), and
  // a stall is explained by asking every member.
  options_.ring.progress = progress_;
  options_.ring.explain_stall = [this](const std::string& tag) { return explain_stall(tag); };
}

ElasticRing::~ElasticRing() {
  if (door_) door_->stop();
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
  // Many handshakes at once, each within its deadline: a slow stranger holds no door.
  net::DoorOptions door;
  door.secret = g->options_.ring.secret;
  door.tls = net::links_encrypted();
  door.identity = elastic_identity(slot);
  door.max_unproven = 16;
  auto* p = g.get();
  auto opened = net::ConnectionServer::start(
      std::move(*listener), port,
      [p](net::Socket& s, const std::string& peer) { p->take(s, peer); },
      [p](const std::string& peer, const std::string& why) {
        p->refusals_.say("troupe elastic ring: slot " + std::to_string(p->slot_) +
                         " refused a connection from " + peer + ": " + why);
      },
      /*max_connections=*/4 * static_cast<size_t>(n) + 8, std::move(door));
  if (!opened) return opened.error();
  g->door_ = std::move(*opened);

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
      if (g->stopped()) return g->stopped_error();
      if (clock_type::now() >= deadline)
        return make_error(Errc::unavailable, "elastic ring: slot " + std::to_string(slot) +
                                                 " could not reach slot 0 at " + g->addresses_[0]);
      std::this_thread::sleep_for(milliseconds(20));  // slot 0 is starting
    }
    m = g->follow(wait + options.rejoin_timeout);
  }
  if (!m) return m.error();
  if (auto st = g->link(*m); !st) return st.error();
  g->options_.stop = nullptr;  // join() only: it may point into the caller's frame
  return g;
}

core::Error ElasticRing::stopped_error() const {
  return make_error(Errc::cancelled,
                    "elastic ring: slot " + std::to_string(slot_) + " stopped while joining");
}

void ElasticRing::take(net::Socket& s, const std::string& peer) {
  auto pending = std::make_unique<Pending>();
  const bool ok = detail::read_within(s, &pending->knock, sizeof(Knock), milliseconds(2000));
  const Knock& k = pending->knock;
  const bool valid =
      ok && k.magic == knock_magic && k.group == options_.ring.group_id && k.slot >= 0 &&
      k.slot < static_cast<int32_t>(addresses_.size()) && k.slot != slot_ &&
      (k.kind == link_kind || k.kind == status_kind || (k.kind == join_kind && slot_ == 0));
  if (!valid) {
    std::fprintf(stderr,
                 "troupe elastic ring: slot %d refused a connection from %s (not a member "
                 "of this group)\n",
                 slot_, peer.c_str());
    return;
  }
  if (k.kind == status_kind) {
    answer_status(s, k.step);
    return;
  }
  pending->socket = net::ConnectionServer::keep(s);  // the door's thread ends, not the link
  std::lock_guard<std::mutex> lock(mu_);
  (k.kind == link_kind ? links_ : joins_).push_back(std::move(pending));
  cv_.notify_all();
}

int ElasticRing::waiting() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(joins_.size());
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
    if (stopped()) return stopped_error();
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
      lock.unlock();  // the predicate may wait (Python's takes the GIL); the door needs mu_
      const bool stop = stopped();
      lock.lock();
      if (stop) return stopped_error();
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
