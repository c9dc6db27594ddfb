#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <vector>

#include "core/expected.hpp"

namespace troupe::actors {

/// The closure tags whose gradients a PS shard has applied, kept bounded. Per chief
/// incarnation (closure ids are (incarnation << 32) + n), a watermark: every closure below
/// it is settled at the chief (completed, failed or cancelled) and never runs again, so its
/// tags are forgotten and a late push of it (from a worker that was taken for lost) is
/// dropped. Tags at or above the watermark are kept, one each: memory follows the closures
/// in flight, not the closures ever run. Plain data, owned by PsShardState.
class AppliedTags {
 public:
  /// Incarnations remembered at once; the least recently used is forgotten beyond this.
  static constexpr size_t max_incarnations = 16;

  /// Raises the watermark of `tag`'s incarnation to `settled_below` (a closure id, as
  /// ClosureMsg carries it) and forgets the tags below it. Ignored unless `settled_below`
  /// is of the tag's incarnation and not above the tag's own closure (a running closure is
  /// never settled).
  void settle(uint64_t tag, uint64_t settled_below);
  /// Whether a push under `tag` may be applied: its closure is not settled and the tag
  /// was not applied before.
  bool fresh(uint64_t tag) const;
  void insert(uint64_t tag);
  /// Tags held, over every incarnation.
  size_t size() const;

  /// For snapshots: per incarnation its number, watermark, tag count and tags.
  std::vector<int64_t> to_ints() const;
  /// From to_ints(); a malformed list is a data_loss error.
  static core::Expected<AppliedTags> from_ints(const std::vector<int64_t>& ints);

 private:
  struct Window {
    uint64_t settled_below = 0;
    std::set<uint64_t> tags;
    uint64_t last_use = 0;
  };
  Window& window(uint32_t incarnation);

  std::map<uint32_t, Window> windows_;
  uint64_t uses_ = 0;
};

}  // namespace troupe::actors
