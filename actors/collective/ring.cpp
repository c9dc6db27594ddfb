// The ring's collectives: all-reduce (reduce-scatter then all-gather, in chunks), fused
// buckets of small tensors, broadcast, each preceded by a header frame that names what
// every rank reduces. The links they run over are in ring_links.cpp.
#include "actors/collective/ring.hpp"

#include <cstring>
#include <utility>

#include "core/half.hpp"

namespace troupe::collective {

using core::Errc;
using core::make_error;

namespace {

constexpr uint32_t frame_magic = 0x31465254;  // "TRF1": a collective's header

// Precedes every collective: what the sender is reducing (one fixed-size frame, so that
// it costs one exchange). Tags longer than the inline field are compared by hash too.
struct Frame {
  uint32_t magic = frame_magic;
  uint32_t tag_bytes = 0;
  uint64_t count = 0;
  uint64_t tag_hash = 0;
  char tag[36] = {};
  uint32_t wire = 0;  // core::DType of the bulk bytes
};
static_assert(sizeof(Frame) == 64, "packed by layout");

Frame frame_of(const std::string& tag, size_t n, core::DType wire) {
  Frame f;
  f.tag_bytes = static_cast<uint32_t>(tag.size());
  f.count = n;
  f.wire = static_cast<uint32_t>(wire);
  f.tag_hash = std::hash<std::string>{}(tag);
  std::memcpy(f.tag, tag.data(), std::min(tag.size(), sizeof f.tag));
  return f;
}

std::string tag_of(const Frame& f) {
  std::string t(f.tag, std::min<size_t>(f.tag_bytes, sizeof f.tag));
  if (f.tag_bytes > sizeof f.tag) t += "...";
  return t;
}

size_t chunk_begin(size_t n, int chunks, int c) {
  return n / static_cast<size_t>(chunks) * static_cast<size_t>(c) +
         std::min(n % static_cast<size_t>(chunks), static_cast<size_t>(c));
}

}  // namespace

core::Status Ring::ring_pass(float* data, size_t n, const std::string& tag, core::DType wire) {
  const int p = size_;
  const bool bf16 = wire == core::DType::bfloat16;
  const size_t element = bf16 ? sizeof(uint16_t) : sizeof(float);
  // Chunk c's floats: [first, second).
  const auto range = [&](int c) {
    c = ((c % p) + p) % p;
    return std::pair<size_t, size_t>{chunk_begin(n, p, c), chunk_begin(n, p, c + 1)};
  };
  size_t largest = 0;
  for (int c = 0; c < p; ++c)
    largest = std::max(largest, range(c).second - range(c).first);
  if (bf16) {
    // What goes out and what lands, as bfloat16 bits.
    if (out16_.size() < largest) out16_.resize(largest);
    if (in16_.size() < largest) in16_.resize(largest);
  } else if (!in_ && scratch_.size() < largest) {
    scratch_.resize(largest);  // TCP's landing space
  }
  const auto bits = [](std::vector<uint16_t>& v) { return reinterpret_cast<char*>(v.data()); };
  // Reduce-scatter: after step s, chunk (rank - s - 1) holds s + 2 ranks' sum here. Each
  // piece is added as it lands, while the rest of the chunk is still arriving; in bfloat16
  // each partial sum is rounded on its way and added in float32.
  for (int s = 0; s < p - 1; ++s) {
    const auto [sb, se] = range(rank_ - s);
    const auto [rb, re] = range(rank_ - s - 1);
    if (bf16) core::to_bf16_fast(data + sb, out16_.data(), se - sb);
    if (auto st = exchange(
            bf16 ? bits(out16_) : reinterpret_cast<const char*>(data + sb), (se - sb) * element,
            bf16 ? bits(in16_) : reinterpret_cast<char*>(scratch_.data()), (re - rb) * element,
            "reduce-scatter step " + std::to_string(s + 1) + " of '" + tag + "'", data + rb,
            /*bulk=*/true, wire);
        !st)
      return st;
  }
  // All-gather: each rank's finished chunk travels round the ring into place. In bfloat16
  // the rank that finished a chunk rounds it here as the others will receive it, so that
  // every rank holds the same values, and each chunk is forwarded in the bits it came in.
  for (int s = 0; s < p - 1; ++s) {
    const auto [sb, se] = range(rank_ + 1 - s);
    const auto [rb, re] = range(rank_ - s);
    if (bf16 && s == 0) {
      core::to_bf16_fast(data + sb, out16_.data(), se - sb);
      core::from_half(out16_.data(), data + sb, se - sb, core::DType::bfloat16);
    }
    if (auto st = exchange(
            bf16 ? bits(out16_) : reinterpret_cast<const char*>(data + sb), (se - sb) * element,
            bf16 ? bits(in16_) : reinterpret_cast<char*>(data + rb), (re - rb) * element,
            "all-gather step " + std::to_string(s + 1) + " of '" + tag + "'");
        !st)
      return st;
    if (bf16) {
      core::from_half(in16_.data(), data + rb, re - rb, core::DType::bfloat16);
      std::swap(out16_, in16_);  // what came is what goes next
    }
  }
  return {};
}

core::Status Ring::check_header(const std::string& tag, size_t n, core::DType wire) {
  const Frame mine = frame_of(tag, n, wire);
  Frame theirs;
  const int left = (rank_ + size_ - 1) % size_;
  if (auto st = exchange(
          reinterpret_cast<const char*>(&mine), sizeof mine, reinterpret_cast<char*>(&theirs),
          sizeof theirs,
          "waiting for tensor '" + tag + "' (not submitted by rank " + std::to_string(left) + ")",
          nullptr, /*bulk=*/false);
      !st)
    return st;
  if (theirs.magic != frame_magic)
    return make_error(Errc::data_loss,
                      "ring: rank " + std::to_string(left) + " sent a malformed collective header");
  // A type this build does not know is named by its number.
  const auto wire_name = [](uint32_t w) {
    return w <= static_cast<uint32_t>(core::DType::int64)
               ? std::string(core::dtype_name(static_cast<core::DType>(w)))
               : "type " + std::to_string(w);
  };
  if (theirs.tag_hash != mine.tag_hash || theirs.tag_bytes != mine.tag_bytes ||
      std::memcmp(theirs.tag, mine.tag, sizeof mine.tag) != 0 || theirs.count != n ||
      theirs.wire != mine.wire)
    return make_error(Errc::invalid_argument,
                      "ring: rank " + std::to_string(rank_) + " reduces '" + tag + "' (" +
                          std::to_string(n) + " floats as " + wire_name(mine.wire) + ") but rank " +
                          std::to_string(left) + " reduces '" + tag_of(theirs) + "' (" +
                          std::to_string(theirs.count) + " floats as " + wire_name(theirs.wire) +
                          ")");
  return {};
}

void RingProgress::enter(const std::string& tag) {
  std::lock_guard<std::mutex> lock(mu_);
  now_.tag = tag;
  now_.inside = true;
  now_.failed = false;
  ++now_.collectives;
  at_ = std::chrono::steady_clock::now();
  recent_.push_back(tag);
  if (recent_.size() > history) recent_.pop_front();
}

void RingProgress::leave(bool ok) {
  std::lock_guard<std::mutex> lock(mu_);
  now_.inside = false;
  now_.failed = !ok;
  at_ = std::chrono::steady_clock::now();
}

RingProgress::Snapshot RingProgress::snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  Snapshot s = now_;
  if (s.collectives > 0)
    s.ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                                 at_)
               .count();
  return s;
}

bool RingProgress::entered(const std::string& tag) const {
  std::lock_guard<std::mutex> lock(mu_);
  return std::find(recent_.begin(), recent_.end(), tag) != recent_.end();
}

core::Status Ring::failed(core::Status st, const std::string& tag) {
  // The ring's state is unknown after a failed collective (bytes half sent): it is closed,
  // so that both neighbours fail at once instead of waiting out their timeouts.
  shut_down();
  broken_ = true;
  if (stalled_ && options_.explain_stall) {
    stalled_ = false;
    return make_error(st.error().code, st.error().message + ". " + options_.explain_stall(tag));
  }
  stalled_ = false;
  return st;
}

core::Status Ring::ended(core::Status st) {
  if (options_.progress) options_.progress->leave(st.ok());
  return st;
}

core::Status Ring::all_reduce(float* data, size_t n, Reduction op, const std::string& tag,
                              core::DType wire) {
  if (wire != core::DType::float32 && wire != core::DType::bfloat16)
    return make_error(Errc::invalid_argument, std::string("ring all-reduce '") + tag +
                                                  "': the wire carries float32 or bfloat16, not " +
                                                  core::dtype_name(wire));
  ++stats_.collectives;
  if (options_.progress) options_.progress->enter(tag);
  if (broken_) return ended(make_error(Errc::unavailable, "ring: closed after an earlier failure"));
  if (size_ > 1) {
    // Both neighbours say what they reduce before any data moves: a rank that never
    // submits is named here by its right neighbour, and a mismatch is caught.
    if (auto st = check_header(tag, n, wire); !st) return ended(failed(st, tag));
    if (n > 0)
      if (auto st = ring_pass(data, n, tag, wire); !st) return ended(failed(st, tag));
  }
  if (op == Reduction::mean && size_ > 1) {
    const float inv = 1.0f / static_cast<float>(size_);
    for (size_t i = 0; i < n; ++i)
      data[i] *= inv;
  }
  return ended({});
}

core::Status Ring::broadcast(float* data, size_t n, int root, const std::string& tag) {
  ++stats_.collectives;
  if (root < 0 || root >= size_)
    return make_error(Errc::invalid_argument, "ring broadcast '" + tag + "': root " +
                                                  std::to_string(root) + " of " +
                                                  std::to_string(size_) + " ranks");
  if (size_ == 1) return {};
  if (options_.progress) options_.progress->enter(tag);
  if (broken_) return ended(make_error(Errc::unavailable, "ring: closed after an earlier failure"));
  if (auto st = check_header(tag, n, core::DType::float32); !st) return ended(failed(st, tag));
  const bool first = rank_ == root, last = (rank_ + 1) % size_ == root;
  constexpr size_t piece = size_t{256} << 10;  // floats per piece
  for (size_t at = 0; at < n; at += piece) {
    const size_t m = std::min(piece, n - at);
    const std::string what = "broadcast of '" + tag + "' from rank " + std::to_string(root);
    auto* bytes = reinterpret_cast<char*>(data + at);
    if (!first)
      if (auto st = exchange(nullptr, 0, bytes, m * sizeof(float), what); !st)
        return ended(failed(st, tag));
    if (!last)
      if (auto st = exchange(bytes, m * sizeof(float), nullptr, 0, what); !st)
        return ended(failed(st, tag));
  }
  return ended({});
}

core::Status Ring::all_reduce(const std::vector<core::TensorView>& tensors, Reduction op,
                              const std::string& tag, core::DType wire) {
  std::vector<Buffer> buffers;
  buffers.reserve(tensors.size());
  for (const auto& t : tensors)
    buffers.push_back({t.data(), static_cast<size_t>(t.size())});
  return all_reduce(buffers, op, tag, wire);
}

core::Status Ring::all_reduce(const std::vector<Buffer>& tensors, Reduction op,
                              const std::string& tag, core::DType wire) {
  const size_t limit = std::max<size_t>(options_.fusion_bytes / sizeof(float), 1);
  std::vector<size_t> pending;  // indices of tensors packed in the bucket
  size_t packed = 0;
  int bucket = 0;
  auto flush = [&]() -> core::Status {
    if (pending.empty()) return {};
    if (bucket_.size() < packed) bucket_.resize(packed);
    size_t at = 0;
    for (size_t i : pending) {
      std::memcpy(bucket_.data() + at, tensors[i].data, tensors[i].count * sizeof(float));
      at += tensors[i].count;
    }
    ++stats_.buckets;
    if (auto st =
            all_reduce(bucket_.data(), packed, op, tag + "#" + std::to_string(bucket++), wire);
        !st)
      return st;
    at = 0;
    for (size_t i : pending) {
      std::memcpy(tensors[i].data, bucket_.data() + at, tensors[i].count * sizeof(float));
      at += tensors[i].count;
    }
    pending.clear();
    packed = 0;
    return {};
  };
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto n = tensors[i].count;
    // An empty tensor has nothing to reduce, and its data may be null.
    if (n == 0) continue;
    if (n >= limit) {  // big enough to go alone, in place
      if (auto st = all_reduce(tensors[i].data, n, op, tag + "#" + std::to_string(bucket++), wire);
          !st)
        return st;
      continue;
    }
    if (packed + n > limit)
      if (auto st = flush(); !st) return st;
    pending.push_back(i);
    packed += n;
  }
  return flush();
}

}  // namespace troupe::collective
