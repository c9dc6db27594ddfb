#include "core/dynamic_table.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

namespace troupe::core {

namespace {

uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// A uniform float in [0, 1) from 64 random bits.
float unit(uint64_t bits) {
  return static_cast<float>(bits >> 40) * (1.0f / 16777216.0f);
}

constexpr size_t initial_index = 1024;

}  // namespace

int64_t dynamic_shard_of(int64_t key, int64_t n) {
  // The index of a table uses the top bits of mix64(key); shards take another mix.
  return static_cast<int64_t>(mix64(static_cast<uint64_t>(key) ^ 0x5851f42d4c957f2dull) %
                              static_cast<uint64_t>(n));
}

Status DynamicTableOptions::check() const {
  auto bad = [](const std::string& what) {
    return make_error(Errc::invalid_argument, "dynamic table: " + what);
  };
  if (width < 1 || width > (int64_t{1} << 20)) return bad("width must be in [1, 2^20]");
  if (max_rows < 0 || max_rows > max_table_rows)
    return bad(
        "max_rows must be in [0, 2^28 - 2] a shard (spread a bigger table over more "
        "shards)");
  if (min_count < 0 || min_count > 65535) return bad("min_count must be in [0, 65535]");
  if (!(admit_probability > 0.0f && admit_probability <= 1.0f))
    return bad("admit_probability must be in (0, 1]");
  if (ttl_steps < 0) return bad("ttl_steps must not be negative");
  if (aging_steps < 1) return bad("aging_steps must be positive");
  if (sketch_depth < 1 || sketch_depth > 12) return bad("sketch_depth must be in [1, 12]");
  if (sketch_width < 32 || sketch_width > (int64_t{1} << 30))
    return bad("sketch_width must be in [32, 2^30]");
  switch (init.kind) {
    case Initializer::Kind::zeros:
    case Initializer::Kind::constant:
    case Initializer::Kind::random_uniform:
    case Initializer::Kind::random_normal:
    case Initializer::Kind::truncated_normal:
      break;
    default:
      return bad(
          "rows are initialised with zeros, constant, random_uniform or (truncated) "
          "random_normal");
  }
  return {};
}

DynamicTable::DynamicTable(const DynamicTableOptions& options, std::unique_ptr<Optimizer> optimizer)
    : options_(options), optimizer_(std::move(optimizer)), rng_(options.init.seed ^ 0x7ab1e) {
  const SlotSet one = optimizer_->make_slots(Shape{1, options_.width});
  stride_ = options_.width * static_cast<int64_t>(1 + one.slots.size());
  for (const Tensor& s : one.slots)
    slot_init_.insert(slot_init_.end(), s.data(), s.data() + s.size());
  index_.assign(initial_index, empty);
  shift_ = 64 - 10;
  if (options_.min_count > 1 && options_.admit_probability >= 1.0f)
    sketch_.assign(
        static_cast<size_t>((options_.sketch_depth * options_.sketch_width + 31) / 32 * 32), 0);
}

DynamicTable::DynamicTable(DynamicTable&&) noexcept = default;
DynamicTable& DynamicTable::operator=(DynamicTable&&) noexcept = default;
DynamicTable::~DynamicTable() = default;

int64_t DynamicTable::memory_bytes() const {
  const int64_t blocks =
      static_cast<int64_t>(blocks_.size()) * (int64_t{1} << block_shift) * stride_ * 4;
  const int64_t meta = static_cast<int64_t>(
      keys_.capacity() * 8 + count_.capacity() * 4 + last_.capacity() * 4 + free_.capacity() * 4 +
      touched_.capacity() + touched_list_.capacity() * 4 + evicted_keys_.capacity() * 8);
  return blocks + meta + static_cast<int64_t>(index_.size() * 4 + sketch_.size() * 2);
}

size_t DynamicTable::home(int64_t key) const {
  return static_cast<size_t>(mix64(static_cast<uint64_t>(key)) >> shift_);
}

int64_t DynamicTable::find(int64_t key) const {
  const size_t mask = index_.size() - 1;
  const uint64_t h = mix64(static_cast<uint64_t>(key));
  const uint32_t tag = entry_tag(h);
  for (size_t i = static_cast<size_t>(h >> shift_);; i = (i + 1) & mask) {
    const uint32_t e = index_[i];
    if (e == empty) return -1;
    if ((e & ~slot_mask) == tag && keys_[e & slot_mask] == key) return e & slot_mask;
  }
}

void DynamicTable::index_insert(int64_t key, uint32_t slot) {
  if (static_cast<size_t>(live_ + 1) * 4 > index_.size() * 3) grow_index();
  const size_t mask = index_.size() - 1;
  const uint64_t h = mix64(static_cast<uint64_t>(key));
  size_t i = static_cast<size_t>(h >> shift_);
  while (index_[i] != empty)
    i = (i + 1) & mask;
  index_[i] = entry_tag(h) | slot;
}

void DynamicTable::grow_index() {
  std::vector<uint32_t> old;
  old.swap(index_);
  index_.assign(old.size() * 2, empty);
  --shift_;
  const size_t mask = index_.size() - 1;
  for (uint32_t e : old) {
    if (e == empty) continue;
    size_t i = home(keys_[e & slot_mask]);
    while (index_[i] != empty)
      i = (i + 1) & mask;
    index_[i] = e;
  }
}

void DynamicTable::index_erase(int64_t key) {
  const size_t mask = index_.size() - 1;
  const uint64_t h = mix64(static_cast<uint64_t>(key));
  const uint32_t tag = entry_tag(h);
  size_t i = static_cast<size_t>(h >> shift_);
  while (index_[i] != empty &&
         ((index_[i] & ~slot_mask) != tag || keys_[index_[i] & slot_mask] != key))
    i = (i + 1) & mask;
  if (index_[i] == empty) return;
  // Backward-shift deletion: move up every later entry of the run whose home is not
  // cyclically within (i, j], so that no probe sequence crosses a hole.
  for (size_t j = (i + 1) & mask; index_[j] != empty; j = (j + 1) & mask) {
    const size_t k = home(keys_[index_[j] & slot_mask]);
    const bool stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
    if (stays) continue;
    index_[i] = index_[j];
    i = j;
  }
  index_[i] = empty;
}

void DynamicTable::init_row(int64_t key, float* row) const {
  const int64_t w = options_.width;
  const Initializer& init = options_.init;
  uint64_t state = mix64(init.seed * 0x9e3779b97f4a7c15ull ^ static_cast<uint64_t>(key));
  for (int64_t j = 0; j < w; ++j) {
    switch (init.kind) {
      case Initializer::Kind::constant:
        row[j] = init.value;
        break;
      case Initializer::Kind::random_uniform:
        row[j] = (2.0f * unit(state = mix64(state)) - 1.0f) * init.value;
        break;
      case Initializer::Kind::random_normal:
      case Initializer::Kind::truncated_normal: {
        float x = 0.0f;
        do {  // truncated: beyond 2 deviations drawn again
          const float u1 = std::max(unit(state = mix64(state)), 1e-7f);
          const float u2 = unit(state = mix64(state));
          x = std::sqrt(-2.0f * std::log(u1)) * std::cos(6.2831853f * u2);
        } while (init.kind == Initializer::Kind::truncated_normal && std::fabs(x) > 2.0f);
        row[j] = init.value * x;
        break;
      }
      default:
        row[j] = 0.0f;
    }
  }
  std::copy(slot_init_.begin(), slot_init_.end(), row + w);
}

uint64_t DynamicTable::score(uint32_t slot) const {
  // The count halved once per aging_steps of age: integer shifts, no floating point on the
  // admission path.
  const auto age = static_cast<uint32_t>(static_cast<uint32_t>(step_) - last_[slot]);
  const int64_t halvings = static_cast<int64_t>(age) / options_.aging_steps;
  // Ties (and counts decayed to 0) go to the older row: age breaks them, in the low bits.
  const uint64_t count = halvings >= 32 ? 0 : count_[slot] >> halvings;
  return (count << 32) | (0xffffffffu - age);
}

void DynamicTable::remove_slot(uint32_t slot) {
  index_erase(keys_[slot]);
  if (tracking_) evicted_keys_.push_back(keys_[slot]);
  count_[slot] = 0;
  free_.push_back(slot);
  --live_;
}

uint32_t DynamicTable::admit(int64_t key) {
  if (live_ >= (options_.max_rows > 0 ? options_.max_rows : max_table_rows)) {
    // The least frequent, most aged of a few sampled rows makes room.
    const auto n = static_cast<uint64_t>(keys_.size());
    int64_t victim = -1;
    uint64_t worst = 0;
    for (int tries = 0, sampled = 0; sampled < 8 && tries < 256; ++tries) {
      const auto s = static_cast<uint32_t>(rng_() % n);
      if (count_[s] == 0) continue;
      ++sampled;
      const uint64_t sc = last_[s] == static_cast<uint32_t>(step_) ? ~uint64_t{0} : score(s);
      if (victim < 0 || sc < worst) victim = s, worst = sc;
    }
    if (victim < 0)  // a table that is nearly all holes: take the first live row
      for (uint32_t s = 0; s < n && victim < 0; ++s)
        if (count_[s] != 0) victim = s;
    remove_slot(static_cast<uint32_t>(victim));
    ++counters_.evicted_cap;
  }
  uint32_t slot;
  if (!free_.empty()) {
    slot = free_.back();
    free_.pop_back();
  } else {
    slot = static_cast<uint32_t>(keys_.size());
    if ((slot & ((1u << block_shift) - 1)) == 0)
      blocks_.emplace_back(new float[static_cast<size_t>((int64_t{1} << block_shift) * stride_)]);
    keys_.push_back(0);
    count_.push_back(0);
    last_.push_back(0);
    touched_.push_back(0);
  }
  keys_[slot] = key;
  count_[slot] = 1;
  last_[slot] = static_cast<uint32_t>(step_);
  init_row(key, slot_data(slot));
  index_insert(key, slot);
  ++live_;
  ++counters_.admitted;
  return slot;
}

uint16_t* DynamicTable::sketch_line(int64_t key) const {
  const uint64_t lines = sketch_.size() / 32;
  const uint64_t h = mix64(static_cast<uint64_t>(key) ^ 0x632be59bd9b4e019ull);
  return const_cast<uint16_t*>(sketch_.data()) + (h % lines) * 32;
}

uint32_t DynamicTable::occurrences(int64_t key) {
  // A blocked count-min sketch: the key's `depth` counters lie in one 64-byte line (32
  // counters), at positions from another hash: one cache miss a key, not one a counter.
  uint16_t* line = sketch_line(key);
  uint64_t h = mix64(static_cast<uint64_t>(key) + 0x9e3779b97f4a7c15ull);
  uint16_t* cell[16];
  uint16_t least = 0xffff;
  for (int d = 0; d < options_.sketch_depth; ++d, h >>= 5) {
    cell[d] = line + (h & 31);
    least = std::min(least, *cell[d]);
  }
  const uint16_t next = least == 0xffff ? least : static_cast<uint16_t>(least + 1);
  for (int d = 0; d < options_.sketch_depth; ++d)  // conservative update
    *cell[d] = std::max(*cell[d], next);
  if (++sketch_adds_ >= static_cast<int64_t>(sketch_.size() / options_.sketch_depth)) {
    for (auto& c : sketch_)
      c = static_cast<uint16_t>(c >> 1);
    sketch_adds_ = 0;
  }
  return next;
}

void DynamicTable::touch(uint32_t slot) {
  if (!tracking_ || touched_[slot]) return;
  touched_[slot] = 1;
  touched_list_.push_back(slot);
}

void DynamicTable::find_many(const int64_t* keys, size_t n, int64_t* slots) const {
  // Three stages, each a few keys behind the one before, so that the cache misses of a big
  // table overlap instead of queueing: the home entry is fetched, then the key of the first
  // entry whose tag matches (the likely row), then the probe runs on memory already near.
  constexpr size_t a = 16, b = 8;
  thread_local std::vector<uint64_t> hashes;
  hashes.resize(n);
  for (size_t i = 0; i < n; ++i)
    hashes[i] = mix64(static_cast<uint64_t>(keys[i]));
  const size_t mask = index_.size() - 1;
  for (size_t i = 0; i < n + a; ++i) {
    if (i < n) __builtin_prefetch(&index_[static_cast<size_t>(hashes[i] >> shift_)]);
    if (i >= b && i - b < n) {
      const uint64_t h = hashes[i - b];
      const uint32_t tag = entry_tag(h);
      for (size_t p = static_cast<size_t>(h >> shift_);; p = (p + 1) & mask) {
        const uint32_t e = index_[p];
        if (e == empty) break;
        if ((e & ~slot_mask) == tag) {
          __builtin_prefetch(&keys_[e & slot_mask]);
          break;
        }
      }
    }
    if (i >= a) {
      const size_t k = i - a;
      const uint64_t h = hashes[k];
      const uint32_t tag = entry_tag(h);
      int64_t found = -1;
      for (size_t p = static_cast<size_t>(h >> shift_);; p = (p + 1) & mask) {
        const uint32_t e = index_[p];
        if (e == empty) break;
        if ((e & ~slot_mask) == tag && keys_[e & slot_mask] == keys[k]) {
          found = e & slot_mask;
          break;
        }
      }
      slots[k] = found;
    }
  }
}

void DynamicTable::lookup(const int64_t* keys, size_t n, float* out) const {
  constexpr size_t ahead = 8;
  thread_local std::vector<int64_t> slots;
  slots.resize(n);
  find_many(keys, n, slots.data());
  const int64_t w = options_.width;
  for (size_t i = 0; i < n; ++i) {
    if (i + ahead < n && slots[i + ahead] >= 0) {
      const float* r = slot_data(static_cast<uint32_t>(slots[i + ahead]));
      __builtin_prefetch(r);
      __builtin_prefetch(r + w - 1);
    }
    float* o = out + static_cast<int64_t>(i) * w;
    if (slots[i] < 0)
      std::fill_n(o, w, 0.0f);
    else
      std::copy_n(slot_data(static_cast<uint32_t>(slots[i])), w, o);
  }
}

const float* DynamicTable::row(int64_t key) const {
  const int64_t s = find(key);
  return s < 0 ? nullptr : slot_data(static_cast<uint32_t>(s));
}

Status DynamicTable::apply(const std::vector<int64_t>& keys, ConstTensorView grads) {
  const int64_t w = options_.width;
  const auto n = static_cast<int64_t>(keys.size());
  if (grads.shape().rank() != 2 || grads.shape()[0] != n || grads.shape()[1] != w)
    return make_error(Errc::invalid_argument,
                      "dynamic table: gradients of shape " + grads.shape().to_string() + " for " +
                          std::to_string(n) + " keys of width " + std::to_string(w));
  ++step_;
  const int64_t t = ++iterations_;
  const auto now = static_cast<uint32_t>(step_);
  // 1. Repeated keys: one occurrence, gradients summed (in key order, so the sum does not
  // depend on the order the keys came in). A worker sends each key once, in order: then
  // nothing is sorted or copied.
  unique_.clear();
  grad_of_.clear();
  bool sorted = true;
  for (size_t i = 1; i < keys.size() && sorted; ++i)
    sorted = keys[i - 1] < keys[i];
  if (sorted) {
    unique_.assign(keys.begin(), keys.end());
    for (int64_t i = 0; i < n; ++i)
      grad_of_.push_back(grads.data() + i * w);
  } else {
    order_.resize(keys.size());
    for (size_t i = 0; i < keys.size(); ++i)
      order_[i] = {keys[i], static_cast<uint32_t>(i)};
    std::sort(order_.begin(), order_.end());
    size_t repeats = 0;
    for (size_t i = 1; i < order_.size(); ++i)
      repeats += order_[i].first == order_[i - 1].first;
    merged_.resize(repeats * static_cast<size_t>(w));
    float* into = merged_.data();
    for (size_t i = 0; i < order_.size();) {
      size_t j = i + 1;
      while (j < order_.size() && order_[j].first == order_[i].first)
        ++j;
      const float* g = grads.data() + static_cast<int64_t>(order_[i].second) * w;
      if (j - i > 1) {
        std::copy_n(g, w, into);
        for (size_t k = i + 1; k < j; ++k) {
          const float* gk = grads.data() + static_cast<int64_t>(order_[k].second) * w;
          for (int64_t e = 0; e < w; ++e)
            into[e] += gk[e];
        }
        g = into;
        into += w;
      }
      unique_.push_back(order_[i].first);
      grad_of_.push_back(g);
      i = j;
    }
  }
  const size_t m = unique_.size();
  // 2. Every key's row, the misses overlapped; a row found is marked as updated now, so
  // that admissions below do not evict it.
  slots_.resize(m);
  find_many(unique_.data(), m, slots_.data());
  // 3. Keys without a row: counted, admitted when they qualify.
  constexpr size_t ahead = 8;
  missing_.clear();
  for (size_t i = 0; i < m; ++i) {
    if (slots_[i] >= 0) {
      const auto s = static_cast<uint32_t>(slots_[i]);
      if (count_[s] != 0xffffffffu) ++count_[s];
      last_[s] = now;
    } else {
      missing_.push_back(static_cast<uint32_t>(i));
    }
  }
  const bool counting = options_.admit_probability >= 1.0f && options_.min_count > 1;
  const int64_t evicted_before = counters_.evicted_cap;
  for (size_t i = 0; i < missing_.size(); ++i) {
    if (counting && i + ahead < missing_.size())
      __builtin_prefetch(sketch_line(unique_[missing_[i + ahead]]));
    const int64_t key = unique_[missing_[i]];
    bool admit_now;
    if (options_.admit_probability < 1.0f)
      admit_now = unit(rng_()) < options_.admit_probability;
    else
      admit_now = !counting || occurrences(key) >= static_cast<uint32_t>(options_.min_count);
    if (admit_now)
      slots_[missing_[i]] = admit(key);
    else
      ++counters_.grads_dropped;
  }
  // 4. The optimizer on every row, each prefetched a few keys ahead. An admission at the
  // cap evicts only rows not updated in this step unless every row it sampled was: then a
  // key found above may have lost its row, and its gradient is dropped.
  const bool check = counters_.evicted_cap != evicted_before;
  const size_t slots = slot_init_.size() / static_cast<size_t>(w);
  float* slot_ptr[8];
  for (size_t i = 0; i < m; ++i) {
    if (i + ahead < m && slots_[i + ahead] >= 0) {
      const float* r = slot_data(static_cast<uint32_t>(slots_[i + ahead]));
      __builtin_prefetch(r);
      __builtin_prefetch(r + stride_ - 1);
    }
    if (slots_[i] < 0) continue;
    const auto slot = static_cast<uint32_t>(slots_[i]);
    if (check && (count_[slot] == 0 || keys_[slot] != unique_[i])) {
      ++counters_.grads_dropped;
      continue;
    }
    float* row = slot_data(slot);
    for (size_t k = 0; k < slots && k < 8; ++k)
      slot_ptr[k] = row + static_cast<int64_t>(k + 1) * w;
    optimizer_->update_elements(row, grad_of_[i], slot_ptr, w, t);
    last_[slot] = now;
    touch(slot);
    ++counters_.rows_updated;
  }
  sweep(std::max<int64_t>(64, 2 * n));
  return {};
}

void DynamicTable::sweep(int64_t budget) {
  if (options_.ttl_steps <= 0 || keys_.empty()) return;
  const auto n = static_cast<uint64_t>(keys_.size());
  for (int64_t b = 0; b < budget; ++b) {
    const auto s = static_cast<uint32_t>(cursor_++ % n);
    if (count_[s] == 0) continue;
    const auto age = static_cast<uint32_t>(static_cast<uint32_t>(step_) - last_[s]);
    if (static_cast<int64_t>(age) > options_.ttl_steps) {
      remove_slot(s);
      ++counters_.evicted_ttl;
    }
  }
}

void DynamicTable::for_each(const std::function<void(const DynamicRow&)>& fn) const {
  for (size_t s = 0; s < keys_.size(); ++s)
    if (count_[s] != 0)
      fn(DynamicRow{keys_[s], count_[s], last_[s], slot_data(static_cast<uint32_t>(s))});
}

int64_t DynamicTable::page(int64_t from, int64_t limit, uint32_t min_count,
                           std::vector<int64_t>& keys, std::vector<float>& values) const {
  const auto end = static_cast<int64_t>(keys_.size());
  int64_t s = std::max<int64_t>(from, 0);
  for (int64_t taken = 0; s < end && taken < limit; ++s) {
    const auto slot = static_cast<size_t>(s);
    if (count_[slot] == 0 || count_[slot] < min_count) continue;
    keys.push_back(keys_[slot]);
    const float* row = slot_data(static_cast<uint32_t>(s));
    values.insert(values.end(), row, row + options_.width);
    ++taken;
  }
  return s < end ? s : -1;
}

void DynamicTable::track_touched(bool on) {
  tracking_ = on;
  if (!on) clear_touched();
}

void DynamicTable::for_each_touched(const std::function<void(const DynamicRow&)>& fn) const {
  for (uint32_t s : touched_list_)
    if (count_[s] != 0) fn(DynamicRow{keys_[s], count_[s], last_[s], slot_data(s)});
}

void DynamicTable::clear_touched() {
  for (uint32_t s : touched_list_)
    touched_[s] = 0;
  touched_list_.clear();
  evicted_keys_.clear();
}

Status DynamicTable::insert(int64_t key, const float* data, uint32_t count, uint32_t last) {
  int64_t s = find(key);
  if (s < 0) {
    const int64_t cap = options_.max_rows > 0 ? options_.max_rows : max_table_rows;
    if (live_ >= cap)
      return make_error(Errc::out_of_range,
                        "dynamic table: a restored row beyond max_rows " + std::to_string(cap));
    const int64_t admitted = counters_.admitted;
    s = admit(key);
    counters_.admitted = admitted;  // a restore, not an admission
  }
  const auto slot = static_cast<uint32_t>(s);
  std::copy_n(data, stride_, slot_data(slot));
  count_[slot] = std::max<uint32_t>(1, count);
  last_[slot] = last;
  touch(slot);
  return {};
}

void DynamicTable::erase(int64_t key) {
  const int64_t s = find(key);
  if (s >= 0) remove_slot(static_cast<uint32_t>(s));
}

void DynamicTable::set_clock(int64_t step, int64_t iterations) {
  step_ = step;
  iterations_ = iterations;
}

}  // namespace troupe::core
