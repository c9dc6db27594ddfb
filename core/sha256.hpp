#pragma once

// SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104), written for the cluster handshake: a
// member proves it holds the job's secret without sending it. Not a general crypto library.

#include <array>
#include <cstdint>
#include <string_view>

namespace troupe::core {

using Digest = std::array<uint8_t, 32>;

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t n);
  void update(std::string_view s) { update(s.data(), s.size()); }
  Digest finish();

 private:
  void block(const uint8_t* p);
  uint32_t h_[8];
  uint8_t buf_[64];
  size_t used_ = 0;
  uint64_t bytes_ = 0;
};

Digest sha256(std::string_view data);
Digest hmac_sha256(std::string_view key, std::string_view message);

/// Equal digests, in time that does not depend on where they differ.
bool digest_equal(const Digest& a, const Digest& b);

}  // namespace troupe::core
