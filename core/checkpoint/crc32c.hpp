#pragma once

#include <cstddef>
#include <cstdint>

namespace troupe::core {

/// CRC-32C (Castagnoli), as used by checkpoints and TensorBoard's record format. Extends
/// `crc` (0 for a fresh checksum) with n bytes. Uses the SSE4.2 instruction when the CPU
/// has it, a table otherwise; both give the same value.
uint32_t crc32c_extend(uint32_t crc, const void* data, size_t n);
inline uint32_t crc32c(const void* data, size_t n) {
  return crc32c_extend(0, data, n);
}

/// The masked form TensorFlow's record files store (so that a CRC of data holding CRCs is
/// not trivially zero).
inline uint32_t mask_crc32c(uint32_t crc) {
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

}  // namespace troupe::core
