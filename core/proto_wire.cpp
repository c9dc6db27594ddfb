#include "core/proto_wire.hpp"

namespace troupe::core::proto {

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

Expected<uint64_t> Reader::read_varint() {
  uint64_t v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (at_ >= bytes_.size())
      return make_error(Errc::data_loss, "varint cut off at offset " + std::to_string(at_));
    const auto b = static_cast<uint8_t>(bytes_[at_++]);
    v |= uint64_t{b & 0x7fu} << shift;
    if ((b & 0x80u) == 0) return v;
  }
  return make_error(Errc::data_loss,
                    "varint longer than 10 bytes at offset " + std::to_string(at_));
}

Expected<Field> Reader::next() {
  const size_t start = at_;
  auto key = read_varint();
  if (!key) return key.error();
  Field f;
  f.number = static_cast<uint32_t>(*key >> 3);
  const auto type = static_cast<uint32_t>(*key & 7);
  if (f.number == 0 || *key >> 32 != 0)
    return make_error(Errc::data_loss, "bad field key at offset " + std::to_string(start));
  auto need = [&](uint64_t n) -> Status {
    if (n > bytes_.size() - at_)
      return make_error(Errc::data_loss, "field " + std::to_string(f.number) + " at offset " +
                                             std::to_string(start) + " runs past the message");
    return {};
  };
  switch (type) {
    case varint: {
      f.type = varint;
      auto v = read_varint();
      if (!v) return v.error();
      f.value = *v;
      return f;
    }
    case fixed64:
    case fixed32: {
      f.type = static_cast<WireType>(type);
      const size_t n = type == fixed64 ? 8 : 4;
      if (auto st = need(n); !st) return st.error();
      std::memcpy(&f.value, bytes_.data() + at_, n);  // little-endian targets only
      at_ += n;
      return f;
    }
    case length_delimited: {
      f.type = length_delimited;
      auto len = read_varint();
      if (!len) return len.error();
      if (auto st = need(*len); !st) return st.error();
      f.bytes = bytes_.substr(at_, *len);
      at_ += *len;
      return f;
    }
    default:
      return make_error(Errc::data_loss, "unsupported wire type " + std::to_string(type) +
                                             " at offset " + std::to_string(start));
  }
}

}  // namespace troupe::core::proto
