#pragma once

// What the elastic ring's two source files share (elastic_ring.cpp: joining, linking and
// re-forming; elastic_membership.cpp: slot 0's plans and the others' following them): the
// frames at a slot's door and of a plan. Internal, not an interface.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "actors/collective/elastic_ring.hpp"
#include "net/auth.hpp"

namespace troupe::collective::elastic_detail {

// A connection to slot `to` once it has proved the job's secret (and this slot too); a
// failure is named on stderr and tried again like an unreachable slot.
/// Who a slot's door is, in the handshake's proofs.
inline std::string elastic_identity(int slot) {
  return "elastic slot " + std::to_string(slot);
}

inline core::Expected<net::Socket> proved(net::Socket s, const std::string& secret, int me, int to,
                                          const std::string& address) {
  if (auto st =
          net::prove_membership(s, secret, std::chrono::milliseconds(5000), elastic_identity(to));
      !st) {
    std::fprintf(stderr, "troupe elastic ring: slot %d: slot %d at %s: %s\n", me, to,
                 address.c_str(), st.error().message.c_str());
    return st.error();
  }
  return s;
}

constexpr uint32_t knock_magic = 0x31455254;  // "TRE1": first bytes at a slot's door
constexpr uint32_t plan_magic = 0x31505254;   // "TRP1": slot 0's plan for a generation
constexpr int32_t max_slots = 4096;

enum Kind : uint32_t { join_kind = 1, reform_kind = 2, link_kind = 3, status_kind = 4 };

// A status knock (any member, at any slot's door) carries in `step` the length of the tag
// it asks about, then the tag; the answer is a StatusHead and the answering slot's current
// or last collective's tag (elastic_status.cpp).
constexpr uint32_t status_magic = 0x31535254;  // "TRS1"
constexpr int64_t max_status_tag = 512;

struct StatusHead {
  uint32_t magic = status_magic;
  int32_t entered = 0;  // the asked tag is among the collectives it entered lately
  int32_t inside = 0;   // in its current collective now
  int32_t failed = 0;   // (not inside) its last collective failed
  uint64_t collectives = 0;
  int64_t ms = 0;  // since it entered (inside) or left its collective
  int32_t tag_bytes = 0;
  int32_t slot = 0;
};
static_assert(sizeof(StatusHead) == 40, "packed by layout");

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

inline std::string slots_text(const std::vector<int>& slots) {
  std::string s;
  for (int x : slots)
    s += (s.empty() ? "" : ", ") + std::to_string(x);
  return s;
}

inline std::chrono::milliseconds left_until(std::chrono::steady_clock::time_point deadline) {
  using std::chrono::milliseconds;
  return std::max(milliseconds(0), std::chrono::duration_cast<milliseconds>(
                                       deadline - std::chrono::steady_clock::now()));
}

}  // namespace troupe::collective::elastic_detail

namespace troupe::collective {

struct ElasticRing::Pending {
  net::Socket socket;
  elastic_detail::Knock knock;
};

}  // namespace troupe::collective
