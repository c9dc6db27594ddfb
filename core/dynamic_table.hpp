#pragma once

// An embedding table without a fixed vocabulary: rows keyed by raw 64-bit ids, created when
// a key is admitted, evicted by age and, under a row cap, by frequency. What a PS shard of a
// dynamic table holds (actors/ps_shard_state.hpp); plain data, tests drive it directly.
//
//   DynamicTableOptions o;
//   o.width = 17; o.max_rows = 1'000'000; o.min_count = 3; o.ttl_steps = 100'000;
//   DynamicTable t(o, make_optimizer("adagrad", 0.05f).value());
//   t.lookup(keys.data(), keys.size(), out);      // unknown keys read as zeros
//   t.apply(keys, grads);                          // counts, admits, updates, evicts
//
// Storage: rows live in blocks of 4096 (value then the optimizer's slots, contiguous per
// row), so the table grows without copying and a row's address never moves; an
// open-addressing index (linear probing, at most 3/4 full; 32-bit entries: a slot number
// under 4 bits of the key's hash, so a probe skips most other keys without reading them)
// maps keys to rows, at most 2^28 - 2 of them a table (a shard); per row the key, an occurrence
// count and the step of its last update. Per row this is key (8) + count and step (8) + index (5.3
// to 10.7) bytes over the row and its slots. Keys not yet admitted are counted in a blocked
// count-min sketch (depth x width 16-bit counters; a key's `depth` counters share one 64-byte line,
// so a count costs one cache miss; conservative update; every counter halved after `width`
// increments so old counts fade), allocated only when min_count > 1.
//
// Time is the table's step: one per apply(). Eviction is incremental: each apply() examines
// a bounded run of rows (a sweeping cursor) for expired ones, and admitting a key at the
// cap evicts one row chosen among 8 sampled rows as the one with the least occurrence count
// decayed by age (halved once per `aging_steps` of age; ties to the oldest; a row its step
// updates only if every sampled row is one): no pass over the whole table ever runs.
//
// apply() works in passes over the step's distinct keys, so that a big table's cache misses
// overlap: every key's row is found first (index entry, then key, prefetched a few keys
// ahead), then the keys without one are counted and admitted, then the rows are updated.
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <utility>
#include <vector>

#include "core/expected.hpp"
#include "core/optimizer.hpp"
#include "core/partitioner.hpp"
#include "core/tensor.hpp"

namespace troupe::core {

/// The most rows one table (a shard of a sharded one) holds, with or without a cap.
inline constexpr int64_t max_table_rows = (int64_t{1} << 28) - 2;

struct DynamicTableOptions {
  int64_t width = 0;     // floats per row
  int64_t max_rows = 0;  // hard cap on rows (0: none but max_table_rows)
  /// A key gets a row at its min_count-th occurrence (1: at its first).
  int32_t min_count = 1;
  /// When in (0, 1): instead of counting, each occurrence admits its key with this
  /// probability (min_count is then unused).
  float admit_probability = 1.0f;
  /// Rows not updated for this many steps are evicted (0: never).
  int64_t ttl_steps = 0;
  /// Cap eviction's decay: a row's count weighs half as much per this many steps of age.
  int64_t aging_steps = 1000;
  int64_t sketch_width = int64_t{1} << 20;  // count-min counters per hash function
  int32_t sketch_depth = 4;                 // counters per key (at most 12)
  /// An admitted row's initial value: zeros, constant, random_uniform or random_normal,
  /// drawn from (init.seed, key), so a key's first value does not depend on when or
  /// where it was admitted.
  Initializer init;

  /// Whether the options are usable; invalid_argument naming the bad one.
  Status check() const;
};

/// What a table did, since it was made.
struct DynamicTableCounters {
  int64_t admitted = 0;       // rows created
  int64_t evicted_ttl = 0;    // rows removed as expired
  int64_t evicted_cap = 0;    // rows removed to admit another under max_rows
  int64_t grads_dropped = 0;  // gradients of keys without a row (not admitted yet)
  int64_t rows_updated = 0;   // row updates applied
};

/// One row as snapshots carry it.
struct DynamicRow {
  int64_t key = 0;
  uint32_t count = 0;           // occurrences (saturating)
  uint32_t last = 0;            // step of the last update (low 32 bits)
  const float* data = nullptr;  // value then slots: width * (1 + slots) floats
};

class DynamicTable {
 public:
  /// `options` must pass check(); the optimizer's slots become each row's slots.
  DynamicTable(const DynamicTableOptions& options, std::unique_ptr<Optimizer> optimizer);
  DynamicTable(DynamicTable&&) noexcept;
  DynamicTable& operator=(DynamicTable&&) noexcept;
  ~DynamicTable();

  const DynamicTableOptions& options() const { return options_; }
  const Optimizer& optimizer() const { return *optimizer_; }
  int64_t width() const { return options_.width; }
  /// Floats per row in storage: the value and each optimizer slot.
  int64_t stride() const { return stride_; }
  int64_t rows() const { return live_; }
  int64_t step() const { return step_; }
  int64_t iterations() const { return iterations_; }
  const DynamicTableCounters& counters() const { return counters_; }
  /// Bytes the table holds: row blocks, per-row metadata, the index and the sketch.
  int64_t memory_bytes() const;
  bool contains(int64_t key) const { return find(key) >= 0; }

  /// The rows of n keys into out (n * width floats); a key without a row reads as zeros.
  /// Changes nothing: callers may look up concurrently (under a shared lock).
  void lookup(const int64_t* keys, size_t n, float* out) const;
  /// The value and slots of one key's row (stride() floats), or nullptr.
  const float* row(int64_t key) const;

  /// One step: counts each key's occurrence (repeated keys once, their gradients summed),
  /// admits keys that qualify, applies the optimizer to every key with a row, drops (and
  /// counts) the gradients of the rest, then evicts expired rows incrementally. Keys in
  /// increasing order, each once (as a worker sends them), are taken as they are; others
  /// are sorted and merged first. grads is [keys.size(), width]; a mismatch is
  /// invalid_argument and changes nothing.
  Status apply(const std::vector<int64_t>& keys, ConstTensorView grads);

  /// Every row (for a full snapshot), in storage order.
  void for_each(const std::function<void(const DynamicRow&)>& fn) const;
  /// Reads the table in pages by slot, for an export while it trains: appends the key and
  /// value columns (width floats) of each row from slot `from` on that has at least
  /// `min_count` occurrences, up to `limit` rows, and returns the slot to go on from (-1 at
  /// the end). A row's slot never moves, so paging through a table that changes between
  /// pages reads every row that lives throughout exactly once; a row admitted meanwhile may
  /// be missed, and one evicted and admitted again may come twice (the caller keeps the
  /// later).
  int64_t page(int64_t from, int64_t limit, uint32_t min_count, std::vector<int64_t>& keys,
               std::vector<float>& values) const;
  /// Delta tracking (off until turned on, so a table nobody snapshots keeps no list):
  /// rows changed (updated or admitted) since the last clear_touched(), and keys evicted
  /// since then.
  void track_touched(bool on);
  bool tracking() const { return tracking_; }
  void for_each_touched(const std::function<void(const DynamicRow&)>& fn) const;
  const std::vector<int64_t>& evicted_since() const { return evicted_keys_; }
  int64_t touched() const { return static_cast<int64_t>(touched_list_.size()); }
  void clear_touched();

  /// Puts a row back (a restore): value and slots as stride() floats. Replaces the key's
  /// row if it has one. Refused (out_of_range) at max_rows.
  Status insert(int64_t key, const float* data, uint32_t count, uint32_t last);
  /// Removes a key's row, if any (a restore replaying a delta's evictions).
  void erase(int64_t key);
  /// Sets the step and the optimizer's iteration count (a restore).
  void set_clock(int64_t step, int64_t iterations);

 private:
  static constexpr int64_t block_shift = 12;  // 4096 rows a block
  static constexpr uint32_t empty = 0xffffffffu;
  /// An index entry is a slot number (28 bits) under 4 bits of the key's hash, so that a
  /// probe passes over most other keys' entries without reading their keys (a cache miss
  /// each). Slots stay below 2^28 - 1: a shard's rows are capped there.
  static constexpr int slot_bits = 28;
  static constexpr uint32_t slot_mask = (1u << slot_bits) - 1;
  static uint32_t entry_tag(uint64_t hash) {
    return static_cast<uint32_t>(hash & 0xf) << slot_bits;
  }

  float* slot_data(uint32_t slot) const {
    return blocks_[slot >> block_shift].get() + (slot & ((1u << block_shift) - 1)) * stride_;
  }
  int64_t find(int64_t key) const;  // slot or -1
  /// find() of n keys into slots, pipelined (a few keys ahead, the next entry's memory is
  /// already fetched).
  void find_many(const int64_t* keys, size_t n, int64_t* slots) const;
  size_t home(int64_t key) const;
  uint32_t admit(int64_t key);  // a new row, initialised; evicts at the cap
  void remove_slot(uint32_t slot);
  void index_insert(int64_t key, uint32_t slot);
  void index_erase(int64_t key);
  void grow_index();
  uint32_t occurrences(int64_t key);  // sketch: +1, the estimate after it
  uint16_t* sketch_line(int64_t key) const;
  void sweep(int64_t budget);
  void touch(uint32_t slot);
  void init_row(int64_t key, float* row) const;
  uint64_t score(uint32_t slot) const;  // lower: evicted first

  DynamicTableOptions options_;
  std::unique_ptr<Optimizer> optimizer_;
  int64_t stride_ = 0;
  std::vector<float> slot_init_;  // one row's initial slot values

  std::vector<std::unique_ptr<float[]>> blocks_;
  std::vector<int64_t> keys_;    // per slot
  std::vector<uint32_t> count_;  // per slot; 0: the slot is free
  std::vector<uint32_t> last_;   // per slot
  std::vector<uint32_t> free_;   // free slots below keys_.size()
  std::vector<uint32_t> index_;  // tag | slot number, `empty` where none
  int shift_ = 64;               // index position: the top (64 - shift_) bits of the hash
  int64_t live_ = 0;

  std::vector<uint16_t> sketch_;
  int64_t sketch_adds_ = 0;

  std::vector<uint8_t> touched_;  // per slot, since clear_touched()
  std::vector<uint32_t> touched_list_;
  std::vector<int64_t> evicted_keys_;
  bool tracking_ = false;

  int64_t step_ = 0, iterations_ = 0;
  uint64_t cursor_ = 0;
  std::mt19937_64 rng_;
  DynamicTableCounters counters_;
  std::vector<std::pair<int64_t, uint32_t>> order_;  // scratch of apply: (key, position)
  std::vector<float> merged_;                        // scratch of apply
  // Scratch of apply: the step's distinct keys, their gradients, their slots (-1: no row),
  // the positions of the keys without a row.
  std::vector<int64_t> unique_, slots_;
  std::vector<const float*> grad_of_;
  std::vector<uint32_t> missing_;
};

/// The shard of `n` that holds `key` (a mix of the key's bits, independent of the bits a
/// table's index uses).
int64_t dynamic_shard_of(int64_t key, int64_t n);

}  // namespace troupe::core
