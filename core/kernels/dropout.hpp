#pragma once

// Which elements inverted dropout keeps: a counter-based draw from (seed, element index),
// so the CPU and CUDA backends drop the same elements and a backward pass finds the
// forward's mask again from the seed, with no mask stored.

#include <cstdint>

#include "core/host_device.hpp"

namespace troupe::core::kernels {

/// splitmix64's finalizer: a bijective mix of 64 bits.
TROUPE_HD inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/// Whether element i survives dropout at `rate`: a uniform draw in [0, 1) from 24 bits of
/// mix64(seed, i) against the rate.
TROUPE_HD inline bool dropout_keep(uint64_t seed, int64_t i, float rate) {
  const uint64_t r = mix64(seed + 0x9e3779b97f4a7c15ULL * (static_cast<uint64_t>(i) + 1));
  const float u = static_cast<float>(r >> 40) * (1.0f / 16777216.0f);
  return u >= rate;
}

}  // namespace troupe::core::kernels
