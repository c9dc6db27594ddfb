// The stall report's every-rank part. A rank whose collective runs past its timeout sees
// only its left neighbour; here it asks every member of the ring, at its door (answered on
// the knock's own thread, whatever the member's own thread is doing), whether it has
// submitted the collective and what it is doing, and names every rank that has not.
#include <future>
#include <string>
#include <vector>

#include "actors/collective/elastic_frames.hpp"
#include "actors/collective/elastic_ring.hpp"
#include "actors/collective/socket_io.hpp"
#include "net/auth.hpp"
#include "net/cluster_spec.hpp"

namespace troupe::collective {

using std::chrono::milliseconds;
using namespace elastic_detail;

namespace {

constexpr milliseconds status_wait{1000};

// One member's answer; `error` when it gave none.
struct Answer {
  StatusHead head;
  std::string tag;
  std::string error;
};

Answer ask_status(const std::string& address, int to, const std::string& secret, uint64_t group,
                  int slot, const std::string& tag) {
  Answer a;
  auto hp = net::parse_host_port(address);
  if (!hp) return {{}, {}, hp.error().message};
  auto s = net::connect_to(hp->host, hp->port, status_wait);
  if (!s) return {{}, {}, "unreachable"};
  if (auto st = net::prove_membership(*s, secret, status_wait, elastic_identity(to)); !st)
    return {{}, {}, "no answer (" + st.error().message + ")"};
  Knock k;
  k.kind = status_kind;
  k.group = group;
  k.slot = slot;
  k.step = static_cast<int64_t>(tag.size());
  if (!detail::write_all(*s, &k, sizeof k) || !detail::write_all(*s, tag.data(), tag.size()))
    return {{}, {}, "no answer (connection closed)"};
  if (!detail::read_within(*s, &a.head, sizeof a.head, status_wait) ||
      a.head.magic != status_magic || a.head.tag_bytes < 0 || a.head.tag_bytes > max_status_tag)
    return {{}, {}, "no answer within " + std::to_string(status_wait.count()) + " ms"};
  a.tag.resize(static_cast<size_t>(a.head.tag_bytes));
  if (!a.tag.empty() && !detail::read_within(*s, a.tag.data(), a.tag.size(), status_wait))
    return {{}, {}, "no answer within " + std::to_string(status_wait.count()) + " ms"};
  return a;
}

// This slot's answer about `asked`, from its progress.
StatusHead status_of(const RingProgress& progress, const std::string& asked, int slot,
                     std::string& tag) {
  const auto now = progress.snapshot();
  StatusHead h;
  h.entered = progress.entered(asked) ? 1 : 0;
  h.inside = now.inside ? 1 : 0;
  h.failed = now.failed ? 1 : 0;
  h.collectives = now.collectives;
  h.ms = now.ms;
  tag = now.tag.substr(0, static_cast<size_t>(max_status_tag));
  h.tag_bytes = static_cast<int32_t>(tag.size());
  h.slot = slot;
  return h;
}

std::string doing(const StatusHead& h, const std::string& tag) {
  if (h.collectives == 0) return "in no collective yet";
  if (h.inside) return "in '" + tag + "' for " + std::to_string(h.ms) + " ms";
  return std::string("in no collective (its last, '") + tag + "', " +
         (h.failed ? "failed " : "ended ") + std::to_string(h.ms) + " ms ago)";
}

}  // namespace

void ElasticRing::answer_status(net::Socket& s, int64_t tag_bytes) {
  if (tag_bytes < 0 || tag_bytes > max_status_tag) return;
  std::string asked(static_cast<size_t>(tag_bytes), '\0');
  if (!asked.empty() && !detail::read_within(s, asked.data(), asked.size(), milliseconds(1000)))
    return;
  std::string tag;
  const StatusHead h = status_of(*progress_, asked, slot_, tag);
  if (detail::write_all(s, &h, sizeof h)) detail::write_all(s, tag.data(), tag.size());
}

std::string ElasticRing::explain_stall(const std::string& tag) {
  const auto& slots = membership_.slots;
  std::vector<std::future<Answer>> answers;
  for (int slot : slots) {
    if (slot == slot_) continue;
    answers.push_back(std::async(std::launch::async, ask_status,
                                 addresses_[static_cast<size_t>(slot)], slot, options_.ring.secret,
                                 options_.ring.group_id, slot_, tag));
  }
  std::string every, missing;
  size_t next = 0;
  for (size_t rank = 0; rank < slots.size(); ++rank) {
    const int slot = slots[rank];
    Answer a;
    if (slot == slot_) {
      a.head = status_of(*progress_, tag, slot_, a.tag);
    } else {
      a = answers[next++].get();
    }
    const std::string who = "rank " + std::to_string(rank) + " (slot " + std::to_string(slot) + ")";
    std::string state;
    if (!a.error.empty()) {
      state = a.error;
    } else {
      state = std::string(a.head.entered ? "submitted it, " : "has not submitted it, ") +
              doing(a.head, a.tag);
    }
    every += (every.empty() ? "" : "; ") + who + ": " + state;
    if (!a.error.empty() || !a.head.entered)
      missing += (missing.empty() ? "" : ", ") + std::to_string(rank) +
                 (a.error.empty() ? "" : " (no answer)");
  }
  return "Every rank on '" + tag + "' (generation " + std::to_string(membership_.generation) +
         "): " + every + ". " +
         (missing.empty() ? "Every rank has submitted it." : "Missing: ranks " + missing + ".");
}

}  // namespace troupe::collective
