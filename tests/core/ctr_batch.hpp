#pragma once

// A CTR batch for the model's tests: n examples with F ids each (three ids per field, so
// rows are shared between examples), random values and D dense features.

#include <random>
#include <vector>

#include "core/data/example.hpp"

namespace troupe::test {

inline core::Batch make_ctr_batch(int64_t n, int64_t F, int64_t D, uint64_t seed) {
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<core::Example> ex(static_cast<size_t>(n));
  for (auto& e : ex) {
    for (int64_t f = 0; f < F; ++f) {
      e.ids.push_back(f * 3 + static_cast<int64_t>(rng() % 3));
      e.values.push_back(u(rng));
    }
    for (int64_t j = 0; j < D; ++j)
      e.features.push_back(u(rng));
    e.label = static_cast<float>(rng() % 2);
  }
  return core::collate(ex);
}

}  // namespace troupe::test
