#pragma once

// The protocol-buffer wire format, by hand: enough to write TensorBoard events and to read
// and write tf.train.Example records. Nothing here trusts its input: every length is
// checked against the bytes that are there.

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "core/expected.hpp"

namespace troupe::core::proto {

enum WireType : uint32_t { varint = 0, fixed64 = 1, length_delimited = 2, fixed32 = 5 };

void put_varint(std::string& out, uint64_t v);

template <class T>
void put_le(std::string& out, T v) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &v, sizeof(T));  // every supported target is little-endian
  out.append(bytes, sizeof(T));
}

inline void put_key(std::string& out, uint32_t field, WireType type) {
  put_varint(out, (uint64_t{field} << 3) | type);
}
inline void put_bytes(std::string& out, uint32_t field, std::string_view bytes) {
  put_key(out, field, length_delimited);
  put_varint(out, bytes.size());
  out.append(bytes);
}

/// One field as read: its number and wire type, and its value (a varint, the raw bits of
/// a fixed32 / fixed64, or the bytes of a length-delimited field).
struct Field {
  uint32_t number = 0;
  WireType type = varint;
  uint64_t value = 0;
  std::string_view bytes;
};

/// Reads the fields of one message in order. Errors (data_loss) say what is wrong and at
/// which offset of the message.
class Reader {
 public:
  explicit Reader(std::string_view bytes) : bytes_(bytes) {}
  bool done() const { return at_ == bytes_.size(); }
  size_t offset() const { return at_; }
  Expected<Field> next();
  /// A varint at the current position (for packed repeated fields).
  Expected<uint64_t> read_varint();

 private:
  std::string_view bytes_;
  size_t at_ = 0;
};

}  // namespace troupe::core::proto
