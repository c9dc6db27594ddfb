#pragma once

// Where the generic kernels (core/kernels/generic.hpp) read and write: a box of indices of up
// to six axes and, for each of N operands, the stride of every axis and a first offset, so
// that one linear index of the box names an element of each operand. Broadcasting is a
// stride of 0, a transpose permuted strides, a slice an offset and strides. Plain values,
// built on the host (core/kernels/plan.hpp) and passed to a CUDA kernel by value. TROUPE_HD,
// no CUDA header.

#include <cstdint>

#include "core/host_device.hpp"

namespace troupe::core::kernels {

/// Shape::max_rank: every tensor of the engine has at most this many axes.
inline constexpr int kMaxAxes = 6;

template <int N>
struct IndexSpace {
  int rank = 0;
  int64_t dims[kMaxAxes] = {};
  int64_t strides[N][kMaxAxes] = {};
  int64_t base[N] = {};

  TROUPE_HD int64_t size() const {
    int64_t n = 1;
    for (int a = 0; a < rank; ++a)
      n *= dims[a];
    return n;
  }
  /// The offset of box element `linear` (row-major over dims) in each operand.
  TROUPE_HD void offsets(int64_t linear, int64_t (&out)[N]) const {
    for (int k = 0; k < N; ++k)
      out[k] = base[k];
    for (int a = rank - 1; a >= 0; --a) {
      const int64_t d = dims[a];
      const int64_t i = d > 1 ? linear % d : 0;
      linear = d > 1 ? linear / d : linear;
      for (int k = 0; k < N; ++k)
        out[k] += i * strides[k][a];
    }
  }
};

}  // namespace troupe::core::kernels
