#include "net/channel.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/half.hpp"

namespace troupe::net {

using core::Errc;
using core::make_error;

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "the tensor channel writes integers and floats in host order: little-endian");

namespace {

constexpr uint32_t frame_magic = 0x33435254;  // "TRC3"
enum FrameKind : uint8_t { request_frame = 1, reply_frame = 2, error_frame = 3 };

// The fixed part of every frame (48 bytes, see docs/wire-format.md).
struct Header {
  uint32_t magic = frame_magic;
  uint8_t kind = 0;
  uint8_t op = 0;
  uint8_t wire = 0;  // a WireDtype: how the payload's tensors are written
  uint8_t reserved = 0;
  uint32_t count = 0;  // items, or the error code of an error frame
  uint32_t meta_bytes = 0;
  uint64_t tag = 0;
  uint64_t payload_bytes = 0;
  uint64_t settled_below = 0;  // requests: PsRequest::settled_below
  uint64_t epoch = 0;          // requests: PsRequest::epoch
};
static_assert(sizeof(Header) == 48, "the header is packed by layout");

std::string errno_text(int err) {
  return std::strerror(err);
}

core::Error io_error(const char* what, int err) {
  if (err == EBADMSG)
    return make_error(Errc::data_loss,
                      std::string(what) + ": a TLS record failed its integrity check");
  if (err == EAGAIN || err == EWOULDBLOCK)
    return make_error(Errc::unavailable, std::string(what) + " timed out");
  return make_error(Errc::unavailable, std::string(what) + ": " + errno_text(err));
}

constexpr const char* closed_between_frames = "connection closed by peer";

// Reads exactly n bytes. `clean_eof` is set when the peer closed before the first byte.
core::Status read_exact(const Socket& s, void* buf, size_t n, bool* clean_eof = nullptr) {
  auto* p = static_cast<char*>(buf);
  size_t got = 0;
  while (got < n) {
    const ssize_t r = recv_some(s, p + got, n - got);
    if (r > 0) {
      got += static_cast<size_t>(r);
    } else if (r == 0) {
      if (got == 0 && clean_eof != nullptr) *clean_eof = true;
      return make_error(got == 0 && clean_eof != nullptr ? Errc::unavailable : Errc::data_loss,
                        got == 0 && clean_eof != nullptr ? closed_between_frames
                                                         : "frame truncated: connection closed");
    } else if (errno != EINTR) {
      return io_error("read", errno);
    }
  }
  return {};
}

// What a reader allocates ahead of the bytes it has received: a frame's claimed sizes are
// the peer's word, so memory beyond this grows only as the bytes arrive (doubling, so a
// large tensor is copied at most once in all). Tensors up to this size are read straight
// into their final memory.
constexpr size_t eager_bytes = size_t{64} << 20;

// Reads n values of T into `out`, allocating no more than `eager_bytes` (or what has
// arrived, whichever is larger) ahead of the bytes received.
template <class T>
core::Status read_growing(const Socket& s, std::vector<T>& out, size_t n) {
  constexpr size_t eager = eager_bytes / sizeof(T);
  out.clear();
  size_t have = 0;
  while (have < n) {
    const size_t next = std::min(n, std::max(eager, 2 * have));
    out.resize(next);
    if (auto st = read_exact(s, out.data() + have, (next - have) * sizeof(T)); !st) return st;
    have = next;
  }
  return {};
}

// Reads n bfloat16 values into `out` as float32, through a bounded buffer, `out` growing
// with the bytes received as read_growing's does.
core::Status read_bf16(const Socket& s, std::vector<float>& out, size_t n) {
  constexpr size_t chunk = size_t{1} << 19;  // values: 1 MiB of bf16 per read
  thread_local std::vector<uint16_t> bits;
  out.clear();
  out.reserve(std::min(n, eager_bytes / sizeof(float)));
  for (size_t have = 0; have < n;) {
    const size_t take = std::min(chunk, n - have);
    bits.resize(take);
    if (auto st = read_exact(s, bits.data(), take * sizeof(uint16_t)); !st) return st;
    out.resize(have + take);
    core::from_half(bits.data(), out.data() + have, take, core::DType::bfloat16);
    have += take;
  }
  return {};
}

core::Status send_exact(const Socket& s, const char* p, size_t n) {
  if (!send_all(s, p, n)) return io_error("write", errno);
  return {};
}

// Over TLS: small buffers gathered into records of up to 16 KiB, large ones written whole.
core::Status write_all_tls(const Socket& s, const std::vector<iovec>& iov) {
  constexpr size_t record = 16 << 10;
  std::string staged;
  for (const iovec& v : iov) {
    const auto* p = static_cast<const char*>(v.iov_base);
    if (v.iov_len < record) {
      staged.append(p, v.iov_len);
      if (staged.size() < record) continue;
    }
    if (!staged.empty()) {
      if (auto st = send_exact(s, staged.data(), staged.size()); !st) return st;
      staged.clear();
    }
    if (v.iov_len >= record)
      if (auto st = send_exact(s, p, v.iov_len); !st) return st;
  }
  return send_exact(s, staged.data(), staged.size());
}

// Writes every byte of the buffers, continuing after partial writes.
core::Status write_all(const Socket& s, std::vector<iovec> iov) {
  if (s.tls() != nullptr) return write_all_tls(s, iov);
  const int fd = s.fd();
  size_t first = 0;
  while (first < iov.size()) {
    msghdr msg{};
    msg.msg_iov = iov.data() + first;
    msg.msg_iovlen = std::min<size_t>(iov.size() - first, IOV_MAX);
    const ssize_t w = ::sendmsg(fd, &msg, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR) continue;
      return io_error("write", errno);
    }
    auto left = static_cast<size_t>(w);
    while (first < iov.size() && left >= iov[first].iov_len) {
      left -= iov[first].iov_len;
      ++first;
    }
    if (left > 0) {
      iov[first].iov_base = static_cast<char*>(iov[first].iov_base) + left;
      iov[first].iov_len -= left;
    }
  }
  return {};
}

class MetaWriter {
 public:
  template <class T>
  void put(T v) {
    const auto* p = reinterpret_cast<const char*>(&v);
    bytes.insert(bytes.end(), p, p + sizeof(T));
  }
  void put_bytes(const void* p, size_t n) {
    bytes.insert(bytes.end(), static_cast<const char*>(p), static_cast<const char*>(p) + n);
  }
  std::vector<char> bytes = std::vector<char>(sizeof(Header));  // the header goes first
};

class MetaReader {
 public:
  explicit MetaReader(const std::vector<char>& b) : bytes_(b) {}
  template <class T>
  bool get(T& v) {
    if (bytes_.size() - pos_ < sizeof(T)) return false;
    std::memcpy(&v, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  // n values of T, refusing counts that the remaining bytes cannot hold.
  template <class T>
  bool get_array(std::vector<T>& out, uint64_t n) {
    if (n > (bytes_.size() - pos_) / sizeof(T)) return false;
    out.resize(n);
    if (n) std::memcpy(out.data(), bytes_.data() + pos_, n * sizeof(T));
    pos_ += n * sizeof(T);
    return true;
  }
  bool done() const { return pos_ == bytes_.size(); }

 private:
  const std::vector<char>& bytes_;
  size_t pos_ = 0;
};

// Item metadata: name, rows, and whether a tensor (and its dims) follows in the payload.
// Under bf16 the tensors are converted into `staging`, which must outlive the write.
void write_items(MetaWriter& m, const std::vector<PsItem>& items, std::vector<iovec>& payload,
                 uint64_t& payload_bytes, WireDtype wire,
                 std::vector<std::vector<uint16_t>>& staging) {
  staging.reserve(items.size());  // iovecs point into it: no reallocation
  for (const auto& it : items) {
    m.put(static_cast<uint32_t>(it.name.size()));
    m.put_bytes(it.name.data(), it.name.size());
    m.put(static_cast<uint32_t>(it.rows.size()));
    m.put_bytes(it.rows.data(), it.rows.size() * sizeof(int64_t));
    const bool has_tensor = !it.tensor.dims.empty() || !it.tensor.data.empty();
    m.put(static_cast<uint8_t>(has_tensor ? 1 : 0));
    if (!has_tensor) continue;
    m.put(static_cast<uint32_t>(it.tensor.dims.size()));
    m.put_bytes(it.tensor.dims.data(), it.tensor.dims.size() * sizeof(int64_t));
    const size_t count = it.tensor.data.size();
    m.put(static_cast<uint64_t>(count));
    if (count == 0) continue;
    if (wire == WireDtype::bfloat16) {
      auto& bits = staging.emplace_back(count);
      core::to_bf16_fast(it.tensor.data.data(), bits.data(), count);
      payload.push_back({bits.data(), count * sizeof(uint16_t)});
      payload_bytes += count * sizeof(uint16_t);
    } else {
      payload.push_back({const_cast<float*>(it.tensor.data.data()), count * sizeof(float)});
      payload_bytes += count * sizeof(float);
    }
  }
}

core::Status send_frame(const Socket& s, Header h, MetaWriter& m,
                        const std::vector<iovec>& payload) {
  h.meta_bytes = static_cast<uint32_t>(m.bytes.size() - sizeof(Header));
  std::memcpy(m.bytes.data(), &h, sizeof(Header));
  std::vector<iovec> iov;
  iov.reserve(payload.size() + 1);
  iov.push_back({m.bytes.data(), m.bytes.size()});
  iov.insert(iov.end(), payload.begin(), payload.end());
  return write_all(s, std::move(iov));
}

core::Error malformed(const std::string& what) {
  return make_error(Errc::data_loss, "malformed tensor-channel frame: " + what);
}

// Reserves in `limits.budget` what the frame `h` will take once read: its metadata twice
// (the buffer, then the names and rows parsed from it), the items and the payload.
core::Status reserve(const ChannelLimits& limits, const Header& h, ByteBudget::Lease* lease) {
  if (limits.budget == nullptr) return {};
  // bf16 payloads take twice their wire bytes once read as float32.
  const uint64_t payload =
      h.wire == static_cast<uint8_t>(WireDtype::bfloat16) ? 2 * h.payload_bytes : h.payload_bytes;
  const uint64_t n =
      2 * uint64_t{h.meta_bytes} + uint64_t{h.count} * sizeof(PsItem) + payload + sizeof(Header);
  switch (limits.budget->reserve(n, limits.budget_wait, *lease)) {
    case ByteBudget::Outcome::granted:
      return {};
    case ByteBudget::Outcome::too_large:
      return make_error(Errc::invalid_argument, "tensor-channel frame needs " + std::to_string(n) +
                                                    " bytes, more than the memory budget of " +
                                                    std::to_string(limits.budget->capacity()));
    case ByteBudget::Outcome::timed_out:
      break;
  }
  return make_error(Errc::unavailable, "tensor-channel frame of " + std::to_string(n) +
                                           " bytes found no room in the memory budget within " +
                                           std::to_string(limits.budget_wait.count()) + " ms");
}

// Reads and checks a header, reserves the frame's memory (requests), then reads the
// metadata bytes.
core::Status read_head(const Socket& s, const ChannelLimits& limits, Header& h,
                       std::vector<char>& meta, ByteBudget::Lease* lease = nullptr) {
  if (limits.idle_timeout.count() > 0 && !wait_readable(s, limits.idle_timeout))
    return make_error(Errc::unavailable,
                      "connection idle for " + std::to_string(limits.idle_timeout.count()) + " ms");
  bool clean_eof = false;
  if (auto st = read_exact(s, &h, sizeof(h), &clean_eof); !st) return st;
  if (h.magic != frame_magic) return malformed("bad magic (not a Troupe tensor channel peer?)");
  if (h.kind < request_frame || h.kind > error_frame) return malformed("unknown frame kind");
  if (h.wire > static_cast<uint8_t>(WireDtype::bfloat16))
    return malformed("unknown wire dtype " + std::to_string(h.wire));
  if (h.kind != error_frame && h.count > limits.max_items)
    return make_error(Errc::invalid_argument, "tensor-channel frame of " + std::to_string(h.count) +
                                                  " items (limit " +
                                                  std::to_string(limits.max_items) + ")");
  if (h.meta_bytes > limits.max_meta_bytes)
    return make_error(Errc::invalid_argument,
                      "tensor-channel frame with " + std::to_string(h.meta_bytes) +
                          " metadata bytes (limit " + std::to_string(limits.max_meta_bytes) + ")");
  if (h.payload_bytes > limits.max_payload_bytes)
    return make_error(Errc::invalid_argument, "tensor-channel frame with " +
                                                  std::to_string(h.payload_bytes) +
                                                  " payload bytes (limit " +
                                                  std::to_string(limits.max_payload_bytes) + ")");
  if (lease != nullptr)
    if (auto st = reserve(limits, h, lease); !st) return st;
  return read_growing(s, meta, h.meta_bytes);
}

// Parses the items' metadata, then reads each tensor's bytes straight into it.
core::Expected<std::vector<PsItem>> read_items(const Socket& s, const Header& h,
                                               const std::vector<char>& meta) {
  // Every item takes at least its name length, row count and tensor flag.
  constexpr uint64_t min_item_meta = 2 * sizeof(uint32_t) + sizeof(uint8_t);
  if (uint64_t{h.count} * min_item_meta > meta.size())
    return malformed(std::to_string(h.count) + " items in " + std::to_string(meta.size()) +
                     " metadata bytes");
  const bool bf16 = h.wire == static_cast<uint8_t>(WireDtype::bfloat16);
  const uint64_t element = bf16 ? sizeof(uint16_t) : sizeof(float);
  MetaReader r(meta);
  std::vector<PsItem> items(h.count);
  std::vector<uint64_t> sizes(h.count, 0);
  uint64_t payload = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    PsItem& it = items[i];
    uint32_t name_len = 0, n_rows = 0;
    uint8_t has_tensor = 0;
    std::vector<char> name;
    if (!r.get(name_len) || !r.get_array(name, name_len)) return malformed("item name");
    it.name.assign(name.begin(), name.end());
    if (!r.get(n_rows) || !r.get_array(it.rows, n_rows)) return malformed("item rows");
    if (!r.get(has_tensor) || has_tensor > 1) return malformed("item tensor flag");
    if (!has_tensor) continue;
    uint32_t rank = 0;
    uint64_t n = 0;
    if (!r.get(rank) || rank > static_cast<uint32_t>(core::Shape::max_rank) ||
        !r.get_array(it.tensor.dims, rank) || !r.get(n))
      return malformed("tensor dims of '" + it.name + "'");
    if (n > (h.payload_bytes - payload) / element)
      return malformed("tensor '" + it.name + "' is larger than the frame's payload");
    payload += n * element;
    sizes[i] = n;
    if (!it.tensor.holds(n))
      return malformed("tensor '" + it.name + "' size does not match its dims");
  }
  if (!r.done()) return malformed("trailing metadata bytes");
  if (payload != h.payload_bytes) return malformed("payload size does not add up");
  for (size_t i = 0; i < items.size(); ++i)
    if (auto st = bf16 ? read_bf16(s, items[i].tensor.data, sizes[i])
                       : read_growing(s, items[i].tensor.data, sizes[i]);
        !st)
      return st.error();
  return items;
}

}  // namespace

core::Status send_request(const Socket& s, const PsRequest& request) {
  Header h;
  h.kind = request_frame;
  h.op = request.op;
  h.count = static_cast<uint32_t>(request.items.size());
  h.tag = request.tag;
  h.settled_below = request.settled_below;
  h.epoch = request.epoch;
  h.wire = static_cast<uint8_t>(request.wire);
  MetaWriter m;
  std::vector<iovec> payload;
  std::vector<std::vector<uint16_t>> staging;
  write_items(m, request.items, payload, h.payload_bytes, request.wire, staging);
  return send_frame(s, h, m, payload);
}

bool is_clean_close(const core::Error& e) {
  return e.code == Errc::unavailable && e.message == closed_between_frames;
}

core::Expected<PsRequest> recv_request(const Socket& s, const ChannelLimits& limits,
                                       ByteBudget::Lease* lease) {
  Header h;
  std::vector<char> meta;
  ByteBudget::Lease held;
  if (auto st = read_head(s, limits, h, meta, lease != nullptr ? lease : &held); !st)
    return st.error();
  if (h.kind != request_frame) return malformed("expected a request frame");
  auto items = read_items(s, h, meta);
  if (!items) return items.error();
  return PsRequest{
      h.op, h.tag, std::move(*items), h.settled_below, static_cast<WireDtype>(h.wire), h.epoch};
}

core::Status send_reply(const Socket& s, const core::Expected<std::vector<PsItem>>& reply,
                        WireDtype wire) {
  Header h;
  MetaWriter m;
  std::vector<iovec> payload;
  std::vector<std::vector<uint16_t>> staging;
  if (reply) {
    h.kind = reply_frame;
    h.count = static_cast<uint32_t>(reply->size());
    h.wire = static_cast<uint8_t>(wire);
    write_items(m, *reply, payload, h.payload_bytes, wire, staging);
  } else {
    h.kind = error_frame;
    h.count = static_cast<uint32_t>(reply.error().code);
    m.put_bytes(reply.error().message.data(), reply.error().message.size());
  }
  return send_frame(s, h, m, payload);
}

core::Expected<std::vector<PsItem>> recv_reply(const Socket& s, const ChannelLimits& limits) {
  Header h;
  std::vector<char> meta;
  if (auto st = read_head(s, limits, h, meta); !st) return st.error();
  if (h.kind == error_frame) {
    if (h.payload_bytes != 0) return malformed("error frame with a payload");
    if (h.count < static_cast<uint32_t>(Errc::invalid_argument) ||
        h.count > static_cast<uint32_t>(Errc::permission_denied))
      return malformed("unknown error code " + std::to_string(h.count));
    return core::Error{static_cast<Errc>(h.count), std::string(meta.begin(), meta.end())};
  }
  if (h.kind != reply_frame) return malformed("expected a reply frame");
  return read_items(s, h, meta);
}

}  // namespace troupe::net
