#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "actors/applied_tags.hpp"
#include "core/checkpoint/checkpoint.hpp"
#include "core/dynamic_table.hpp"
#include "core/expected.hpp"
#include "core/optimizer.hpp"
#include "net/wire.hpp"

namespace troupe::actors {

/// The state of one parameter-server task: its shards of variables, their optimizer slots,
/// and for each shard the closure ids whose gradients it has applied. Plain data: the
/// ps_shard actor owns one, tests drive it directly.
///
/// Every request is validated (name, shape, rows, payload consistency); a bad one is an
/// error value and changes nothing, so one faulty client cannot corrupt or stop a shard.
class PsShardState {
 public:
  struct Counters {
    int64_t variables = 0;
    int64_t pulls = 0;
    int64_t updates_applied = 0;
    int64_t updates_duplicate = 0;  // a closure id seen before: ignored (at most once)
    int64_t requests_rejected = 0;
    net::PsLoad load;  // of the batched requests handle() served
  };
  /// The dynamic tables' counters and sizes, summed over this task's shards of them.
  struct TableTotals {
    int64_t rows = 0, admitted = 0, evicted = 0, grads_dropped = 0, bytes = 0;
  };
  TableTotals table_totals() const;

  /// Creates the shard `def` describes. Creating the same shard again with the same
  /// definition is a no-op (a coordinator may retry); a different definition under an
  /// existing name is an invalid_argument error.
  core::Status create(const net::VariableDef& def);
  core::Expected<net::WireTensor> pull(const std::string& name);
  /// Rows of the shard, by shard-local index.
  core::Expected<net::WireTensor> pull_rows(const std::string& name,
                                            const std::vector<int64_t>& rows);
  /// Applies a dense gradient tagged with `closure_id`; returns false (and applies nothing)
  /// if this shard already applied that tag, or the tag's closure is settled at the chief
  /// (below `settled_below`, or below an earlier request's; see AppliedTags).
  core::Expected<bool> push(uint64_t closure_id, const std::string& name,
                            const net::WireTensor& grad, uint64_t settled_below = 0);
  /// push() and then pull() in one request: the shard's value after the update (or as it
  /// is, when the closure id was applied before).
  core::Expected<net::WireTensor> push_pull(uint64_t closure_id, const std::string& name,
                                            const net::WireTensor& grad,
                                            uint64_t settled_below = 0);
  core::Expected<bool> push_rows(uint64_t closure_id, const std::string& name,
                                 const net::RowsUpdate& update, uint64_t settled_below = 0);

  /// The pulls of a batched request (ops pull and pull_rows), reading only: nothing
  /// changes and nothing is counted, so readers holding a shared lock may call it at once
  /// (actors/shared_shard.hpp). Any other op is an invalid_argument error.
  core::Expected<std::vector<net::PsItem>> read(const net::PsRequest& request) const;

  /// Every item of a batched request, in order, with the methods above. The first failing
  /// item ends it with its error; items before it have been applied (each at most once,
  /// so the client may send the whole request again).
  core::Expected<std::vector<net::PsItem>> handle(net::PsRequest& request);

  /// A page of a dynamic table's shard (DynamicTable::page): at most `limit` rows (fewer
  /// when they would pass 16 MiB) with at least `min_count` occurrences from slot `from`
  /// on, for an export from the live task. Reads only, like read(). A shard that is not a
  /// dynamic table's, or a limit below 1, is an invalid_argument error.
  core::Expected<net::RowsPage> rows_page(const std::string& name, int64_t from, int64_t limit,
                                          int32_t min_count) const;

  /// A shard's value, optimizer slots and iteration count (for a chief's backup).
  core::Expected<net::ShardState> state(const std::string& name);
  /// Replaces a shard's value, slots and iteration count (a chief restoring its backup).
  /// Shapes and the slot count must match the shard's; otherwise nothing changes. The
  /// applied closure ids are kept: closures of the restored chief carry new ids.
  core::Status assign(const std::string& name, const net::ShardState& state);

  /// Everything a restarted task needs to carry on: each shard's definition, value,
  /// optimizer slots and iteration count, the closure ids it applied, and the count of
  /// updates applied.
  core::Checkpoint snapshot() const;
  /// The same, one shard at a time: the names of the shards held, the entries of one shard
  /// (false when it is gone), and the closing entries. Each shard's copy is consistent on
  /// its own (value, slots, iterations and applied tags together), which is all a restore
  /// needs: at-most-once holds per shard.
  std::vector<std::string> shard_names() const;
  bool snapshot_shard(const std::string& name, core::Checkpoint& into) const;
  void snapshot_counters(core::Checkpoint& into) const;
  /// A state rebuilt from snapshot(): every saved shard created from its definition and
  /// loaded. A snapshot that is incomplete or inconsistent is a data_loss error.
  static core::Expected<PsShardState> from_snapshot(const core::Checkpoint& ckpt);

  /// Delta snapshots. With tracking on, each dynamic table's shard keeps the rows changed
  /// and the keys evicted since its last copy (snapshot_shard or snapshot_shard_delta,
  /// then mark_copied); shards created later track too.
  void track_deltas(bool on);
  bool tracking_deltas() const { return track_deltas_; }
  /// As snapshot_shard, except that a dynamic table's shard gives only the rows changed
  /// since its last copy and ("<var>/evicted") the keys evicted since. Other shards come
  /// whole: only dynamic tables grow without bound.
  bool snapshot_shard_delta(const std::string& name, core::Checkpoint& into) const;
  /// Starts the shard's next delta from now (forgets its changed rows and evicted keys); call
  /// it under the same lock as the copy. It changes only the delta bookkeeping, which no
  /// reader reads, so the one writing thread may call it holding the lock shared.
  void mark_copied(const std::string& name);
  /// Applies a delta snapshot (snapshot_shard_delta's entries and "delta" = {the full
  /// snapshot's number, the delta's index}) on top of the state it follows: evicted keys
  /// removed, changed rows replaced, dense shards, applied tags and counts replaced, shards
  /// created since added. An inconsistent delta is a data_loss error; the state may then be
  /// partly updated (restore from the files again, stopping before that delta).
  core::Status apply_delta(const core::Checkpoint& delta);
  /// updates_applied as restored by from_snapshot(); -1 for a state that was not.
  int64_t restored_from() const { return restored_from_; }

  const Counters& counters() const { return counters_; }
  /// Closure tags held for at-most-once over every shard (bounded by the closures in
  /// flight, not by the closures ever applied).
  size_t applied_tags() const;
  /// The definition of every shard held, in shard_key order (for a reader of a live job
  /// that did not create its variables: troupe export --job).
  std::vector<net::VariableDef> definitions() const;
  /// Whether the shard kept under `key` (net::shard_key) is here.
  bool has(const std::string& key) const { return vars_.count(key) > 0; }

  /// Rejoining as a replica of replicated shards (actors/ps_routing.hpp): each shard of
  /// `defs` is made afresh (what this task held of it before is stale) and keeps the
  /// updates it is sent, unapplied and acknowledged, until install() gives it a copy. Until
  /// then it serves nothing: pulls, reads and copies of it are `unavailable`.
  core::Status rejoin(const std::vector<net::VariableDef>& defs);
  /// A whole shard with the closure tags it applied (snapshot_shard's entries), for a
  /// replica that rejoins.
  core::Expected<core::Checkpoint> copy_shard(const std::string& key) const;
  /// Loads a rejoining shard from `copy`, then applies the updates it kept meanwhile
  /// whose tags the copy had not applied (so each update is in it once). A copy that does
  /// not match the shard's definition is a data_loss error and the shard stays rejoining.
  core::Status install(const std::string& key, const core::Checkpoint& copy);
  /// Shards rejoining, and updates they keep.
  size_t rejoining() const;

 private:
  /// An update a rejoining shard keeps until its copy arrives.
  struct Kept {
    uint8_t op = 0;
    uint64_t tag = 0, settled_below = 0;
    net::PsItem item;
  };
  struct Shard {
    net::VariableDef def;
    core::Tensor value;                         // empty for a dynamic table's shard
    std::unique_ptr<core::DynamicTable> table;  // a dynamic table's shard: its rows
    std::unique_ptr<core::Optimizer> optimizer;
    core::SlotSet slots;
    AppliedTags applied;
    /// Set while the shard rejoins: the updates kept for install().
    std::unique_ptr<std::vector<Kept>> kept;
  };
  /// One shard's entries of a snapshot or delta into this state (load, install).
  core::Status load_shard(const std::string& name, const std::vector<int64_t>& def,
                          const core::Checkpoint& ckpt, bool delta);
  /// Whether snapshot record `key` (a tensor's or ints' key) is one of a variable in
  /// `defined` (loaded from the same snapshot), or a count of the whole state.
  bool known_record(const std::string& key, bool tensor,
                    const std::set<std::string>& defined) const;

  core::Expected<Shard*> find(const std::string& name);
  core::Expected<const Shard*> lookup(const std::string& name) const;  // find, not counted
  core::Expected<net::WireTensor> rows_of(const std::string& name,
                                          const std::vector<int64_t>& rows) const;
  /// The at-most-once update path shared by dense and row pushes.
  template <class Apply>
  core::Expected<bool> apply_once(uint64_t closure_id, uint64_t settled_below,
                                  const std::string& name, const net::WireTensor& grad,
                                  Apply apply);
  core::Error reject(core::Error e);
  /// A full snapshot's or a delta's entries into this state (from_snapshot, apply_delta).
  core::Status load(const core::Checkpoint& ckpt, bool delta);
  bool write_shard(const std::string& name, core::Checkpoint& c, bool delta) const;

  std::map<std::string, Shard> vars_;  // by net::shard_key: "<variable>#<shard>"
  Counters counters_;
  int64_t restored_from_ = -1;
  bool track_deltas_ = false;
};

/// A shard copy (copy_shard) for the wire, and back: a malformed one (keys and values not
/// paired, an inconsistent tensor) is a data_loss error.
net::ShardCopy to_shard_copy(const core::Checkpoint& c);
core::Expected<core::Checkpoint> from_shard_copy(const net::ShardCopy& c);

}  // namespace troupe::actors
