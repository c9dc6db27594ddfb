// The CPU's generic kernels of the layer graph (core/backend.hpp, "Kernels of the layer
// graph"): activations, element-wise arithmetic, column copies, reductions and dropout.
// The normalizations are core/cpu/norm_kernels.cpp. Per-element arithmetic is
// core/kernels/'s, shared with the CUDA backend; large work is split over the intra-op
// threads (core/parallel.hpp) in contiguous chunks.
#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

#include "core/cpu/cpu_backend.hpp"
#include "core/kernels/activation.hpp"
#include "core/kernels/dropout.hpp"
#include "core/parallel.hpp"

namespace troupe::core {

namespace {

int64_t last_dim(const Shape& s) {
  return s.rank() == 0 ? 1 : s[s.rank() - 1];
}

// One loop per function, so that the switch in kernels::activate is folded away and the
// loop body is straight-line code.
template <ActFn F>
void forward_range(const float* x, float* y, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i)
    y[i] = kernels::activate(F, x[i]);
}

template <ActFn F>
void backward_range(const float* x, const float* y, const float* dy, float* dx, int64_t begin,
                    int64_t end) {
  for (int64_t i = begin; i < end; ++i)
    dx[i] = kernels::activate_backward(F, x != nullptr ? x[i] : 0.0f, y != nullptr ? y[i] : 0.0f,
                                       dy[i]);
}

using ForwardRange = void (*)(const float*, float*, int64_t, int64_t);
using BackwardRange = void (*)(const float*, const float*, const float*, float*, int64_t, int64_t);

// Indexed by ActFn, in its order (the entries of softmax and log_softmax, by rows, are never
// called).
template <size_t... I>
constexpr std::array<ForwardRange, sizeof...(I)> forward_table(std::index_sequence<I...>) {
  return {forward_range<static_cast<ActFn>(I)>...};
}
template <size_t... I>
constexpr std::array<BackwardRange, sizeof...(I)> backward_table(std::index_sequence<I...>) {
  return {backward_range<static_cast<ActFn>(I)>...};
}
constexpr auto kForward = forward_table(std::make_index_sequence<kActFnCount>());
constexpr auto kBackward = backward_table(std::make_index_sequence<kActFnCount>());

}  // namespace

void CpuBackend::activation_forward(ActFn f, ConstTensorView x, TensorView y) {
  const float* in = x.data();
  float* out = y.data();
  if (kernels::act_fn_by_rows(f)) {
    const int64_t c = last_dim(x.shape());
    const bool log = f == ActFn::log_softmax;
    parallel_for(x.size() / std::max<int64_t>(1, c), rows_per_chunk(c), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r)
        log ? kernels::log_softmax_row(in + r * c, out + r * c, c)
            : kernels::softmax_row(in + r * c, out + r * c, c);
    });
    return;
  }
  const ForwardRange run = kForward[static_cast<size_t>(f)];
  parallel_for(x.size(), kParallelGrain, [&](int64_t b, int64_t e) { run(in, out, b, e); });
}

void CpuBackend::activation_backward(ActFn f, ConstTensorView x, ConstTensorView y,
                                     ConstTensorView dy, TensorView dx) {
  float* out = dx.data();
  if (kernels::act_fn_by_rows(f)) {
    const int64_t c = last_dim(y.shape());
    const bool log = f == ActFn::log_softmax;
    parallel_for(y.size() / std::max<int64_t>(1, c), rows_per_chunk(c), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r)
        log ? kernels::log_softmax_backward_row(y.data() + r * c, dy.data() + r * c, out + r * c, c)
            : kernels::softmax_backward_row(y.data() + r * c, dy.data() + r * c, out + r * c, c);
    });
    return;
  }
  const BackwardRange run = kBackward[static_cast<size_t>(f)];
  const float* xs = x.empty() ? nullptr : x.data();
  const float* ys = y.empty() ? nullptr : y.data();
  parallel_for(dy.size(), kParallelGrain,
               [&](int64_t b, int64_t e) { run(xs, ys, dy.data(), out, b, e); });
}

void CpuBackend::axpby(float a, ConstTensorView x, float b, TensorView y) {
  // x may be y (Average scales its sum in place): no restrict.
  const float* in = x.data();
  float* out = y.data();
  parallel_for(x.size(), kParallelGrain, [&](int64_t begin, int64_t end) {
    if (b == 0.0f)
      for (int64_t i = begin; i < end; ++i)
        out[i] = a * in[i];
    else
      for (int64_t i = begin; i < end; ++i)
        out[i] = a * in[i] + b * out[i];
  });
}

void CpuBackend::multiply(ConstTensorView x1, ConstTensorView x2, TensorView y, bool accumulate) {
  const float* a = x1.data();
  const float* b = x2.data();
  float* out = y.data();
  parallel_for(x1.size(), kParallelGrain, [&](int64_t begin, int64_t end) {
    if (accumulate)
      for (int64_t i = begin; i < end; ++i)
        out[i] += a[i] * b[i];
    else
      for (int64_t i = begin; i < end; ++i)
        out[i] = a[i] * b[i];
  });
}

void CpuBackend::copy_columns(ConstTensorView src, TensorView dst, int64_t offset,
                              bool accumulate) {
  const int64_t r = dst.shape().rank() == 0 ? 1 : dst.shape()[0];
  const int64_t C = dst.size() / std::max<int64_t>(1, r), c = src.size() / std::max<int64_t>(1, r);
  TROUPE_ASSERT(offset >= 0 && offset + c <= C, "copy_columns outside the destination");
  parallel_for(r, rows_per_chunk(c), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const float* from = src.data() + i * c;
      float* to = dst.data() + i * C + offset;
      if (accumulate)
        for (int64_t j = 0; j < c; ++j)
          to[j] += from[j];
      else
        std::memcpy(to, from, static_cast<size_t>(c) * sizeof(float));
    }
  });
}

void CpuBackend::take_columns(ConstTensorView src, int64_t offset, TensorView dst) {
  const int64_t r = dst.shape().rank() == 0 ? 1 : dst.shape()[0];
  const int64_t c = dst.size() / std::max<int64_t>(1, r), C = src.size() / std::max<int64_t>(1, r);
  TROUPE_ASSERT(offset >= 0 && offset + c <= C, "take_columns outside the source");
  parallel_for(r, rows_per_chunk(c), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      std::memcpy(dst.data() + i * c, src.data() + i * C + offset,
                  static_cast<size_t>(c) * sizeof(float));
  });
}

void CpuBackend::reduce_middle(Reduce op, ConstTensorView x, TensorView y) {
  TROUPE_ASSERT(x.shape().rank() == 3 && x.shape()[1] > 0, "reduce_middle takes [a, m > 0, c]");
  const int64_t m = x.shape()[1], c = x.shape()[2];
  parallel_for(x.shape()[0], rows_per_chunk(m * c), [&](int64_t b, int64_t e) {
    if (c == 1) {  // one value per position (a linear term's pooling): no row to copy
      for (int64_t a = b; a < e; ++a) {
        const float* in = x.data() + a * m;
        float out = in[0];
        for (int64_t k = 1; k < m; ++k)
          out = op == Reduce::max ? std::max(out, in[k]) : out + in[k];
        y.data()[a] = op == Reduce::mean ? out / static_cast<float>(m) : out;
      }
      return;
    }
    for (int64_t a = b; a < e; ++a) {
      const float* in = x.data() + a * m * c;
      float* out = y.data() + a * c;
      std::memcpy(out, in, static_cast<size_t>(c) * sizeof(float));
      for (int64_t k = 1; k < m; ++k) {
        const float* row = in + k * c;
        if (op == Reduce::max)
          for (int64_t j = 0; j < c; ++j)
            out[j] = std::max(out[j], row[j]);
        else
          for (int64_t j = 0; j < c; ++j)
            out[j] += row[j];
      }
      if (op == Reduce::mean)
        for (int64_t j = 0; j < c; ++j)
          out[j] = out[j] / static_cast<float>(m);
    }
  });
}

void CpuBackend::reduce_middle_backward(Reduce op, ConstTensorView x, ConstTensorView y,
                                        ConstTensorView dy, TensorView dx) {
  TROUPE_ASSERT(dx.shape().rank() == 3, "reduce_middle_backward gives [a, m, c]");
  const int64_t m = dx.shape()[1], c = dx.shape()[2];
  const float scale = op == Reduce::mean ? 1.0f / static_cast<float>(m) : 1.0f;
  parallel_for(dx.shape()[0], rows_per_chunk(m * c), [&](int64_t b, int64_t e) {
    if (c == 1 && op != Reduce::max) {
      for (int64_t a = b; a < e; ++a)
        std::fill_n(dx.data() + a * m, m, dy.data()[a] * scale);
      return;
    }
    for (int64_t a = b; a < e; ++a) {
      const float* g = dy.data() + a * c;
      float* out = dx.data() + a * m * c;
      if (op != Reduce::max) {
        for (int64_t k = 0; k < m; ++k)
          for (int64_t j = 0; j < c; ++j)
            out[k * c + j] = g[j] * scale;
        continue;
      }
      std::fill(out, out + m * c, 0.0f);
      const float* in = x.data() + a * m * c;
      const float* best = y.data() + a * c;
      for (int64_t j = 0; j < c; ++j)
        for (int64_t k = 0; k < m; ++k)
          if (in[k * c + j] == best[j]) {
            out[k * c + j] = g[j];
            break;
          }
    }
  });
}

void CpuBackend::row_dot(ConstTensorView x1, ConstTensorView x2, TensorView y) {
  const int64_t r = y.size(), c = x1.size() / std::max<int64_t>(1, r);
  parallel_for(r, rows_per_chunk(c), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const float* a = x1.data() + i * c;
      const float* v = x2.data() + i * c;
      float s = 0.0f;
      for (int64_t j = 0; j < c; ++j)
        s += a[j] * v[j];
      y.data()[i] = s;
    }
  });
}

void CpuBackend::scale_rows(ConstTensorView x, ConstTensorView s, TensorView y, bool accumulate) {
  const int64_t r = s.size(), c = x.size() / std::max<int64_t>(1, r);
  parallel_for(r, rows_per_chunk(c), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const float f = s.data()[i];
      const float* in = x.data() + i * c;
      float* out = y.data() + i * c;
      if (accumulate)
        for (int64_t j = 0; j < c; ++j)
          out[j] += in[j] * f;
      else
        for (int64_t j = 0; j < c; ++j)
          out[j] = in[j] * f;
    }
  });
}

void CpuBackend::column_sums(ConstTensorView x, TensorView y, bool accumulate) {
  const int64_t c = y.size(), r = x.size() / std::max<int64_t>(1, c);
  // Chunks of columns, each summed down the rows in order (row segments are contiguous).
  parallel_for(c, std::max<int64_t>(16, rows_per_chunk(r)), [&](int64_t b, int64_t e) {
    float* out = y.data();
    if (!accumulate) std::fill(out + b, out + e, 0.0f);
    for (int64_t i = 0; i < r; ++i) {
      const float* row = x.data() + i * c;
      for (int64_t j = b; j < e; ++j)
        out[j] += row[j];
    }
  });
}

void CpuBackend::dropout_forward(ConstTensorView x, TensorView y, float rate, uint64_t seed) {
  const float keep = 1.0f - rate;
  const float* in = x.data();
  float* out = y.data();
  parallel_for(x.size(), kParallelGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      out[i] = kernels::dropout_keep(seed, i, rate) ? in[i] / keep : 0.0f;
  });
}

void CpuBackend::dropout_backward(ConstTensorView dy, TensorView dx, float rate, uint64_t seed) {
  dropout_forward(dy, dx, rate, seed);  // the same mask and scale
}

}  // namespace troupe::core
