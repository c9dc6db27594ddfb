// FarmHash's Fingerprint64 and SipHash-2-4, written from their published definitions
// (FarmHash's farmhashna::Hash64, which CityHash64 v1.1 inspired; Aumasson and Bernstein,
// "SipHash: a fast short-input PRF", 2012). Both read the bytes as little-endian words on
// any host. tests/core/test_sparse_layers.cpp checks them against the SipHash paper's test
// vector and TensorFlow's bins.
#include "core/layers/string_hash.hpp"

#include <utility>

namespace troupe::core::layers {

namespace {

// FarmHash's three odd 64-bit constants.
constexpr uint64_t kK0 = 0xc3a5c85c97cb3127ULL;
constexpr uint64_t kK1 = 0xb492b66fbe98f273ULL;
constexpr uint64_t kK2 = 0x9ae16a3b2f90404fULL;

using Bytes = const unsigned char*;

uint64_t word64(Bytes p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i)
    v = (v << 8) | p[i];
  return v;
}

uint64_t word32(Bytes p) {
  return static_cast<uint64_t>(p[0]) | static_cast<uint64_t>(p[1]) << 8 |
         static_cast<uint64_t>(p[2]) << 16 | static_cast<uint64_t>(p[3]) << 24;
}

uint64_t rotate_right(uint64_t v, int bits) {
  return bits == 0 ? v : (v >> bits) | (v << (64 - bits));
}

uint64_t rotate_left(uint64_t v, int bits) {
  return (v << bits) | (v >> (64 - bits));
}

uint64_t shift_mix(uint64_t v) {
  return v ^ (v >> 47);
}

// Two words into one, multiplied by `mul` (odd) between xor-shifts.
uint64_t mix(uint64_t u, uint64_t v, uint64_t mul) {
  uint64_t a = shift_mix((u ^ v) * mul);
  uint64_t b = shift_mix((v ^ a) * mul);
  return b * mul;
}

uint64_t hash_up_to_16(Bytes s, uint64_t len) {
  if (len >= 8) {
    const uint64_t mul = kK2 + len * 2;
    const uint64_t a = word64(s) + kK2, b = word64(s + len - 8);
    return mix(rotate_right(b, 37) * mul + a, (rotate_right(a, 25) + b) * mul, mul);
  }
  if (len >= 4) {
    const uint64_t mul = kK2 + len * 2;
    return mix(len + (word32(s) << 3), word32(s + len - 4), mul);
  }
  if (len > 0) {
    // The first, middle and last bytes, and the length.
    const uint32_t y = static_cast<uint32_t>(s[0]) + (static_cast<uint32_t>(s[len >> 1]) << 8);
    const uint32_t z = static_cast<uint32_t>(len) + (static_cast<uint32_t>(s[len - 1]) << 2);
    return shift_mix((y * kK2) ^ (z * kK0)) * kK2;
  }
  return kK2;
}

uint64_t hash_17_to_32(Bytes s, uint64_t len) {
  const uint64_t mul = kK2 + len * 2;
  const uint64_t a = word64(s) * kK1, b = word64(s + 8);
  const uint64_t c = word64(s + len - 8) * mul, d = word64(s + len - 16) * kK2;
  return mix(rotate_right(a + b, 43) + rotate_right(c, 30) + d, a + rotate_right(b + kK2, 18) + c,
             mul);
}

uint64_t hash_33_to_64(Bytes s, uint64_t len) {
  const uint64_t mul = kK2 + len * 2;
  const uint64_t a = word64(s) * kK2, b = word64(s + 8);
  const uint64_t c = word64(s + len - 8) * mul, d = word64(s + len - 16) * kK2;
  const uint64_t y = rotate_right(a + b, 43) + rotate_right(c, 30) + d;
  const uint64_t z = mix(y, a + rotate_right(b + kK2, 18) + c, mul);
  const uint64_t e = word64(s + 16) * mul, f = word64(s + 24);
  const uint64_t g = (y + word64(s + len - 32)) * mul;
  const uint64_t h = (z + word64(s + len - 24)) * mul;
  return mix(rotate_right(e + f, 43) + rotate_right(g, 30) + h, e + rotate_right(f + a, 18) + g,
             mul);
}

// 32 bytes (four words w, x, y, z) folded into two running words seeded with a and b.
std::pair<uint64_t, uint64_t> fold32(Bytes s, uint64_t a, uint64_t b) {
  const uint64_t w = word64(s), x = word64(s + 8), y = word64(s + 16), z = word64(s + 24);
  a += w;
  b = rotate_right(b + a + z, 21);
  const uint64_t c = a;
  a += x + y;
  b += rotate_right(a, 44);
  return {a + z, b + c};
}

// More than 64 bytes: 64-byte blocks into a state of seven words, then the last 64 bytes
// (which may overlap the blocks) with a length-dependent multiplier.
uint64_t hash_long(Bytes s, uint64_t len) {
  constexpr uint64_t seed = 81;
  uint64_t x = seed * kK2 + word64(s);
  uint64_t y = seed * kK1 + 113;
  uint64_t z = shift_mix(y * kK2 + 113) * kK2;
  std::pair<uint64_t, uint64_t> v{0, 0}, w{0, 0};
  const Bytes end = s + ((len - 1) / 64) * 64;
  const Bytes last = s + len - 64;
  do {
    x = rotate_right(x + y + v.first + word64(s + 8), 37) * kK1;
    y = rotate_right(y + v.second + word64(s + 48), 42) * kK1;
    x ^= w.second;
    y += v.first + word64(s + 40);
    z = rotate_right(z + w.first, 33) * kK1;
    v = fold32(s, v.second * kK1, x + w.first);
    w = fold32(s + 32, z + w.second, y + word64(s + 16));
    std::swap(z, x);
    s += 64;
  } while (s != end);
  const uint64_t mul = kK1 + ((z & 0xff) << 1);
  s = last;
  w.first += (len - 1) & 63;
  v.first += w.first;
  w.first += v.first;
  x = rotate_right(x + y + v.first + word64(s + 8), 37) * mul;
  y = rotate_right(y + v.second + word64(s + 48), 42) * mul;
  x ^= w.second * 9;
  y += v.first * 9 + word64(s + 40);
  z = rotate_right(z + w.first, 33) * mul;
  v = fold32(s, v.second * mul, x + w.first);
  w = fold32(s + 32, z + w.second, y + word64(s + 16));
  std::swap(z, x);
  return mix(mix(v.first, w.first, mul) + shift_mix(y) * kK0 + z, mix(v.second, w.second, mul) + x,
             mul);
}

// SipHash's state and its ARX round.
struct SipState {
  uint64_t v0, v1, v2, v3;

  void round() {
    v0 += v1;
    v1 = rotate_left(v1, 13) ^ v0;
    v0 = rotate_left(v0, 32);
    v2 += v3;
    v3 = rotate_left(v3, 16) ^ v2;
    v0 += v3;
    v3 = rotate_left(v3, 21) ^ v0;
    v2 += v1;
    v1 = rotate_left(v1, 17) ^ v2;
    v2 = rotate_left(v2, 32);
  }
  // A message word through the two compression rounds of SipHash-2-4.
  void absorb(uint64_t m) {
    v3 ^= m;
    round();
    round();
    v0 ^= m;
  }
};

}  // namespace

uint64_t fingerprint64(std::string_view text) {
  const auto s = reinterpret_cast<Bytes>(text.data());
  const uint64_t len = text.size();
  if (len <= 16) return hash_up_to_16(s, len);
  if (len <= 32) return hash_17_to_32(s, len);
  if (len <= 64) return hash_33_to_64(s, len);
  return hash_long(s, len);
}

uint64_t siphash64(uint64_t key0, uint64_t key1, std::string_view text) {
  const auto s = reinterpret_cast<Bytes>(text.data());
  const size_t len = text.size();
  // The initial state: the key xored with "somepseudorandomlygeneratedbytes".
  SipState st{key0 ^ 0x736f6d6570736575ULL, key1 ^ 0x646f72616e646f6dULL,
              key0 ^ 0x6c7967656e657261ULL, key1 ^ 0x7465646279746573ULL};
  size_t at = 0;
  for (; at + 8 <= len; at += 8)
    st.absorb(word64(s + at));
  // The last word: the remaining bytes, little-endian, and the length's low byte on top.
  uint64_t last = static_cast<uint64_t>(len & 0xff) << 56;
  for (size_t i = 0; at + i < len; ++i)
    last |= static_cast<uint64_t>(s[at + i]) << (8 * i);
  st.absorb(last);
  st.v2 ^= 0xff;
  for (int i = 0; i < 4; ++i)
    st.round();
  return st.v0 ^ st.v1 ^ st.v2 ^ st.v3;
}

std::string decimal(int64_t v) {
  return std::to_string(v);
}

}  // namespace troupe::core::layers
