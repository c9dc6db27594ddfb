#include "core/unique_ids.hpp"

#include <algorithm>
#include <utility>

namespace troupe::core {

namespace {

// Sorts (key, position) pairs by key, stably: least significant 11-bit digit first, only as
// many digits as the keys' range needs (two for ids below 4M, six for hashed 64-bit ids).
void radix_sort(std::vector<uint64_t>& keys, std::vector<uint32_t>& pos, uint64_t range) {
  constexpr int digit = 11;
  constexpr size_t buckets = size_t{1} << digit;
  thread_local std::vector<uint64_t> keys2;
  thread_local std::vector<uint32_t> pos2;
  keys2.resize(keys.size());
  pos2.resize(pos.size());
  for (int shift = 0; shift < 64 && (range >> shift) != 0; shift += digit) {
    size_t count[buckets] = {};
    for (uint64_t k : keys)
      ++count[(k >> shift) & (buckets - 1)];
    size_t sum = 0;
    for (size_t& c : count)
      sum += std::exchange(c, sum);
    for (size_t i = 0; i < keys.size(); ++i) {
      const size_t at = count[(keys[i] >> shift) & (buckets - 1)]++;
      keys2[at] = keys[i];
      pos2[at] = pos[i];
    }
    keys.swap(keys2);
    pos.swap(pos2);
  }
}

}  // namespace

void unique_ids(const std::vector<int64_t>& ids, std::vector<int64_t>& unique,
                std::vector<int32_t>& index) {
  unique_ids(ids.data(), ids.size(), unique, index);
}

void unique_ids(const int64_t* ids, size_t n, std::vector<int64_t>& unique,
                std::vector<int32_t>& index) {
  unique.clear();
  index.resize(n);
  if (n == 0) return;
  const auto [lo_at, hi_at] = std::minmax_element(ids, ids + n);
  const int64_t lo = *lo_at;
  const uint64_t span = static_cast<uint64_t>(*hi_at) - static_cast<uint64_t>(lo);
  if (span / 64 <= n) {
    // Ids in a span of at most 64 per id (a batch of a fixed table's fields): a bitmap of
    // the span gives the sorted unique ids, and each id's index is the count of set bits
    // before its own; two passes over the ids, the bitmap in cache.
    thread_local std::vector<uint64_t> bits;
    thread_local std::vector<uint32_t> before;  // set bits in the words before each
    const size_t words = static_cast<size_t>(span / 64) + 1;
    bits.assign(words, 0);
    for (size_t i = 0; i < n; ++i) {
      const uint64_t k = static_cast<uint64_t>(ids[i]) - static_cast<uint64_t>(lo);
      bits[k >> 6] |= uint64_t{1} << (k & 63);
    }
    before.resize(words);
    uint32_t count = 0;
    for (size_t w = 0; w < words; ++w) {
      before[w] = count;
      for (uint64_t x = bits[w]; x != 0; x &= x - 1)
        unique.push_back(lo +
                         static_cast<int64_t>(w * 64 + static_cast<size_t>(__builtin_ctzll(x))));
      count += static_cast<uint32_t>(__builtin_popcountll(bits[w]));
    }
    for (size_t i = 0; i < n; ++i) {
      const uint64_t k = static_cast<uint64_t>(ids[i]) - static_cast<uint64_t>(lo);
      const uint64_t below = bits[k >> 6] & ((uint64_t{1} << (k & 63)) - 1);
      index[i] =
          static_cast<int32_t>(before[k >> 6] + static_cast<uint32_t>(__builtin_popcountll(below)));
    }
    return;
  }
  // Otherwise the ids relative to the smallest, as unsigned keys that sort as the ids do;
  // each with its position, so one pass over the sorted keys gives both the unique ids and
  // the index.
  thread_local std::vector<uint64_t> keys;
  thread_local std::vector<uint32_t> pos;
  keys.resize(n);
  pos.resize(n);
  for (size_t i = 0; i < n; ++i) {
    keys[i] = static_cast<uint64_t>(ids[i]) - static_cast<uint64_t>(lo);
    pos[i] = static_cast<uint32_t>(i);
  }
  radix_sort(keys, pos, span);
  for (size_t j = 0; j < n; ++j) {
    if (j == 0 || keys[j] != keys[j - 1])
      unique.push_back(static_cast<int64_t>(keys[j] + static_cast<uint64_t>(lo)));
    index[pos[j]] = static_cast<int32_t>(unique.size() - 1);
  }
}

}  // namespace troupe::core
