// The CPU's kernels of the layer graph's sparse layers: an embedding call's gather of its
// rows by index and the scatter of their gradients back (Embedding), and the
// factorization machine's pairwise term (FactorizationMachine), the same arithmetic as
// core/kernels/'s per-element forms that the CUDA backend runs; large work is split over the
// intra-op threads in contiguous chunks that write disjoint memory, so results do not depend on the
// number of threads.
#include <algorithm>
#include <cstring>
#include <vector>

#include "core/cpu/cpu_backend.hpp"
#include "core/parallel.hpp"

namespace troupe::core {

namespace {

constexpr int64_t kGrain = int64_t{1} << 14;  // elements per chunk at least

int64_t rows_per_chunk(int64_t width) {
  return std::max<int64_t>(1, kGrain / std::max<int64_t>(1, width));
}

}  // namespace

void CpuBackend::gather_index(ConstTensorView rows, ConstTensorView index, TensorView y) {
  const int64_t n = index.size(), d = rows.shape()[rows.shape().rank() - 1];
  TROUPE_ASSERT(y.size() == n * d, "gather_index: y is not [index, width]");
  const int32_t* at = index.data_as<int32_t>();
  parallel_for(n, rows_per_chunk(d), [&](int64_t i0, int64_t i1) {
    if (d > 32) {
      for (int64_t i = i0; i < i1; ++i)
        std::memcpy(y.data() + i * d, rows.data() + static_cast<int64_t>(at[i]) * d,
                    static_cast<size_t>(d) * sizeof(float));
      return;
    }
    // Narrow rows (a linear term's 1, a factor's 8): a call to memcpy a row costs more
    // than the copy.
    for (int64_t i = i0; i < i1; ++i) {
      const float* __restrict src = rows.data() + static_cast<int64_t>(at[i]) * d;
      float* __restrict dst = y.data() + i * d;
      for (int64_t j = 0; j < d; ++j)
        dst[j] = src[j];
    }
  });
}

void CpuBackend::scatter_add_index(ConstTensorView dy, ConstTensorView index, TensorView grads) {
  const int64_t n = index.size(), d = grads.shape()[grads.shape().rank() - 1];
  const int64_t u = grads.size() / std::max<int64_t>(1, d);
  TROUPE_ASSERT(dy.size() == n * d, "scatter_add_index: dy is not [index, width]");
  const int32_t* at = index.data_as<int32_t>();
  // Ids repeat, so rows are shared between examples: split by columns instead, every chunk
  // adding its columns of every example in order (the sums do not depend on the split).
  const int64_t column_grain = std::max<int64_t>(8, kGrain / std::max<int64_t>(1, n));
  parallel_for(d, column_grain, [&](int64_t j0, int64_t j1) {
    const int64_t width = j1 - j0;
    for (int64_t r = 0; r < u; ++r)
      std::fill_n(grads.data() + r * d + j0, width, 0.0f);
    for (int64_t i = 0; i < n; ++i) {
      const float* __restrict src = dy.data() + i * d + j0;
      float* __restrict dst = grads.data() + static_cast<int64_t>(at[i]) * d + j0;
      for (int64_t j = 0; j < width; ++j)
        dst[j] += src[j];
    }
  });
}

namespace {

// A chunk's running sums over the fields, k of each: on the stack for the widths embeddings
// have (an allocation per chunk and step showed in profiles of small models), else on the
// heap.
class FactorSums {
 public:
  explicit FactorSums(int64_t k) {
    if (2 * k > kStack) heap_.resize(static_cast<size_t>(2 * k));
    base_ = 2 * k > kStack ? heap_.data() : stack_;
    k_ = k;
  }
  float* sum() { return base_; }
  float* squares() { return base_ + k_; }

 private:
  static constexpr int64_t kStack = 512;
  float stack_[kStack];
  std::vector<float> heap_;
  float* base_ = nullptr;
  int64_t k_ = 0;
};

}  // namespace

// The factorization machine's sums run along the factor axis k, which is contiguous: one
// pass over an example's fields adds every factor's column at once. Each column's sum is
// still taken over the fields in order, and the columns' terms added in order, as
// kernels::fm_forward and fm_backward (the CUDA kernels) take them.
void CpuBackend::fm_forward(ConstTensorView x, TensorView y) {
  const int64_t b = x.shape()[0], fields = x.shape()[1], k = x.shape()[2];
  parallel_for(b, rows_per_chunk(fields * k), [&](int64_t i0, int64_t i1) {
    FactorSums sums(k);
    float* __restrict sum = sums.sum();
    float* __restrict squares = sums.squares();
    for (int64_t i = i0; i < i1; ++i) {
      const float* xb = x.data() + i * fields * k;
      std::fill_n(sum, k, 0.0f);
      std::fill_n(squares, k, 0.0f);
      for (int64_t f = 0; f < fields; ++f) {
        const float* __restrict v = xb + f * k;
        for (int64_t j = 0; j < k; ++j) {
          sum[j] += v[j];
          squares[j] += v[j] * v[j];
        }
      }
      float out = 0.0f;
      for (int64_t j = 0; j < k; ++j)
        out += sum[j] * sum[j] - squares[j];
      y.data()[i] = 0.5f * out;
    }
  });
}

void CpuBackend::fm_backward(ConstTensorView x, ConstTensorView dy, TensorView dx) {
  const int64_t b = x.shape()[0], fields = x.shape()[1], k = x.shape()[2];
  parallel_for(b, rows_per_chunk(fields * k), [&](int64_t i0, int64_t i1) {
    FactorSums sums(k);
    float* __restrict sum = sums.sum();
    for (int64_t i = i0; i < i1; ++i) {
      const float* __restrict xb = x.data() + i * fields * k;
      float* __restrict dxb = dx.data() + i * fields * k;
      std::fill_n(sum, k, 0.0f);
      for (int64_t f = 0; f < fields; ++f)
        for (int64_t j = 0; j < k; ++j)
          sum[j] += xb[f * k + j];
      const float g = dy.data()[i];
      for (int64_t f = 0; f < fields; ++f)
        for (int64_t j = 0; j < k; ++j)
          dxb[f * k + j] = g * (sum[j] - xb[f * k + j]);
    }
  });
}

}  // namespace troupe::core
