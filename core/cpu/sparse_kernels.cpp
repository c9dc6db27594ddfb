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
  const int64_t column_grain = std::max<int64_t>(8, kParallelGrain / std::max<int64_t>(1, n));
  parallel_for(d, column_grain, [&](int64_t j0, int64_t j1) {
    const int64_t width = j1 - j0;
    if (width == d)
      std::fill_n(grads.data(), u * d, 0.0f);
    else
      for (int64_t r = 0; r < u; ++r)
        std::fill_n(grads.data() + r * d + j0, width, 0.0f);
    if (d == 1) {  // a linear term's rows: one float each
      for (int64_t i = 0; i < n; ++i)
        grads.data()[at[i]] += dy.data()[i];
      return;
    }
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

// The factorization machine over examples [i0, i1). K > 0: the factor width known when
// compiling (the common widths), so the sums stay in registers; K == 0: `k` at run time.
// Both add in the same order.
// Eight floats as one vector register (GCC's vector extension): the factor widths that are
// multiples of 8 keep their running sums in registers, which the compiler did not do for
// arrays of them. Each lane adds in the order the scalar loops do.
typedef float Lanes8 __attribute__((vector_size(32)));

inline Lanes8 load8(const float* p) {
  Lanes8 v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}
inline void store8(float* p, Lanes8 v) {
  __builtin_memcpy(p, &v, sizeof v);
}

template <int64_t K>
void fm_forward_rows(const float* x, float* y, int64_t i0, int64_t i1, int64_t fields,
                     int64_t k_run) {
  if constexpr (K > 0) {
    constexpr int64_t L = K / 8;
    for (int64_t i = i0; i < i1; ++i) {
      const float* xb = x + i * fields * K;
      Lanes8 sum[L] = {}, squares[L] = {};
      for (int64_t f = 0; f < fields; ++f)
        for (int64_t l = 0; l < L; ++l) {
          const Lanes8 v = load8(xb + f * K + 8 * l);
          sum[l] += v;
          squares[l] += v * v;
        }
      float out = 0.0f;
      for (int64_t l = 0; l < L; ++l)
        for (int j = 0; j < 8; ++j)
          out += sum[l][j] * sum[l][j] - squares[l][j];
      y[i] = 0.5f * out;
    }
  } else {
    const int64_t k = k_run;
    FactorSums sums(k);
    float* __restrict sum = sums.sum();
    float* __restrict squares = sums.squares();
    for (int64_t i = i0; i < i1; ++i) {
      const float* xb = x + i * fields * k;
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
      y[i] = 0.5f * out;
    }
  }
}

template <int64_t K>
void fm_backward_rows(const float* x, const float* dy, float* dx, int64_t i0, int64_t i1,
                      int64_t fields, int64_t k_run) {
  if constexpr (K > 0) {
    constexpr int64_t L = K / 8;
    for (int64_t i = i0; i < i1; ++i) {
      const float* xb = x + i * fields * K;
      float* dxb = dx + i * fields * K;
      Lanes8 sum[L] = {};
      for (int64_t f = 0; f < fields; ++f)
        for (int64_t l = 0; l < L; ++l)
          sum[l] += load8(xb + f * K + 8 * l);
      const float g = dy[i];
      for (int64_t f = 0; f < fields; ++f)
        for (int64_t l = 0; l < L; ++l)
          store8(dxb + f * K + 8 * l, g * (sum[l] - load8(xb + f * K + 8 * l)));
    }
  } else {
    const int64_t k = k_run;
    FactorSums sums(k);
    float* __restrict sum = sums.sum();
    for (int64_t i = i0; i < i1; ++i) {
      const float* __restrict xb = x + i * fields * k;
      float* __restrict dxb = dx + i * fields * k;
      std::fill_n(sum, k, 0.0f);
      for (int64_t f = 0; f < fields; ++f)
        for (int64_t j = 0; j < k; ++j)
          sum[j] += xb[f * k + j];
      const float g = dy[i];
      for (int64_t f = 0; f < fields; ++f)
        for (int64_t j = 0; j < k; ++j)
          dxb[f * k + j] = g * (sum[j] - xb[f * k + j]);
    }
  }
}

// Runs `Rows<K>` with K the factor width where it is a common one, else K = 0.
template <template <int64_t> class Rows, class... Args>
void by_width(int64_t k, Args... args) {
  switch (k) {
    case 8:
      return Rows<8>::run(args..., k);
    case 16:
      return Rows<16>::run(args..., k);
    case 32:
      return Rows<32>::run(args..., k);
    default:
      return Rows<0>::run(args..., k);
  }
}
template <int64_t K>
struct FmForward {
  static void run(const float* x, float* y, int64_t i0, int64_t i1, int64_t fields, int64_t k) {
    fm_forward_rows<K>(x, y, i0, i1, fields, k);
  }
};
template <int64_t K>
struct FmBackward {
  static void run(const float* x, const float* dy, float* dx, int64_t i0, int64_t i1,
                  int64_t fields, int64_t k) {
    fm_backward_rows<K>(x, dy, dx, i0, i1, fields, k);
  }
};

}  // namespace

// The factorization machine's sums run along the factor axis k, which is contiguous: one
// pass over an example's fields adds every factor's column at once. Each column's sum is
// still taken over the fields in order, and the columns' terms added in order, as
// kernels::fm_forward and fm_backward (the CUDA kernels) take them.
void CpuBackend::fm_forward(ConstTensorView x, TensorView y) {
  const int64_t b = x.shape()[0], fields = x.shape()[1], k = x.shape()[2];
  parallel_for(b, rows_per_chunk(fields * k), [&](int64_t i0, int64_t i1) {
    by_width<FmForward>(k, x.data(), y.data(), i0, i1, fields);
  });
}

void CpuBackend::fm_backward(ConstTensorView x, ConstTensorView dy, TensorView dx) {
  const int64_t b = x.shape()[0], fields = x.shape()[1], k = x.shape()[2];
  parallel_for(b, rows_per_chunk(fields * k), [&](int64_t i0, int64_t i1) {
    by_width<FmBackward>(k, x.data(), dy.data(), dx.data(), i0, i1, fields);
  });
}

}  // namespace troupe::core
