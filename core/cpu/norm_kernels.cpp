// The CPU's normalization kernels of the layer graph: batch statistics, batch and layer
// normalization and their gradients. The arithmetic is core/kernels/normalization.hpp's
// (shared with the CUDA backend); here it is arranged for the cache: per-channel sums run
// down the rows, each row's segment contiguous, over chunks of channels split between the
// intra-op threads, and per-row work is split by rows.
#include <algorithm>
#include <vector>

#include "core/cpu/cpu_backend.hpp"
#include "core/kernels/normalization.hpp"
#include "core/parallel.hpp"

namespace troupe::core {

namespace {

// Chunks of channels: each goes down all the rows.
int64_t channel_grain(int64_t rows) {
  return std::max<int64_t>(16, rows_per_chunk(rows));
}

// Per-channel coefficients of one call, kept between calls so that a step allocates
// nothing once warm (one buffer per thread that calls a kernel).
std::vector<float>& scratch(size_t n) {
  thread_local std::vector<float> buffer;
  if (buffer.size() < n) buffer.resize(n);
  return buffer;
}

const float* or_null(ConstTensorView v) {
  return v.empty() ? nullptr : v.data();
}

}  // namespace

void CpuBackend::moments(ConstTensorView x, TensorView mean, TensorView var) {
  const int64_t c = mean.size(), r = x.size() / std::max<int64_t>(1, c);
  parallel_for(c, channel_grain(r), [&](int64_t b, int64_t e) {
    float* m = mean.data();
    float* v = var.data();
    std::fill(m + b, m + e, 0.0f);
    std::fill(v + b, v + e, 0.0f);
    for (int64_t i = 0; i < r; ++i) {
      const float* row = x.data() + i * c;
      for (int64_t j = b; j < e; ++j)
        m[j] += row[j];
    }
    for (int64_t j = b; j < e; ++j)
      m[j] = m[j] / static_cast<float>(r);
    for (int64_t i = 0; i < r; ++i) {
      const float* row = x.data() + i * c;
      for (int64_t j = b; j < e; ++j) {
        const float d = row[j] - m[j];
        v[j] += d * d;
      }
    }
    for (int64_t j = b; j < e; ++j)
      v[j] = v[j] / static_cast<float>(r);
  });
}

void CpuBackend::batch_norm_forward(ConstTensorView x, ConstTensorView mean, ConstTensorView var,
                                    ConstTensorView gamma, ConstTensorView beta, float epsilon,
                                    TensorView y) {
  const int64_t c = mean.size(), r = x.size() / std::max<int64_t>(1, c);
  auto& coef = scratch(static_cast<size_t>(2 * c));
  float* inv = coef.data();
  float* shift = coef.data() + c;
  for (int64_t j = 0; j < c; ++j)
    kernels::norm_coefficients(mean.data()[j], kernels::rstd_of(var.data()[j], epsilon),
                               or_null(gamma), or_null(beta), j, inv[j], shift[j]);
  parallel_for(r, rows_per_chunk(c), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const float* in = x.data() + i * c;
      float* out = y.data() + i * c;
      for (int64_t j = 0; j < c; ++j)
        out[j] = in[j] * inv[j] + shift[j];
    }
  });
}

void CpuBackend::batch_norm_backward(ConstTensorView x, ConstTensorView mean, ConstTensorView var,
                                     ConstTensorView gamma, float epsilon, bool batch_stats,
                                     ConstTensorView dy, TensorView dx, TensorView dgamma,
                                     TensorView dbeta) {
  const int64_t c = mean.size(), r = x.size() / std::max<int64_t>(1, c);
  auto& buf = scratch(static_cast<size_t>(3 * c));
  float* rstd = buf.data();
  float* sum_dy = buf.data() + c;
  float* sum_dy_xhat = buf.data() + 2 * c;
  for (int64_t j = 0; j < c; ++j)
    rstd[j] = kernels::rstd_of(var.data()[j], epsilon);
  const bool sums = !dgamma.empty() || !dbeta.empty() || (batch_stats && !dx.empty());
  if (sums)
    parallel_for(c, channel_grain(r), [&](int64_t b, int64_t e) {
      std::fill(sum_dy + b, sum_dy + e, 0.0f);
      std::fill(sum_dy_xhat + b, sum_dy_xhat + e, 0.0f);
      for (int64_t i = 0; i < r; ++i) {
        const float* in = x.data() + i * c;
        const float* g = dy.data() + i * c;
        for (int64_t j = b; j < e; ++j) {
          sum_dy[j] += g[j];
          sum_dy_xhat[j] += g[j] * ((in[j] - mean.data()[j]) * rstd[j]);
        }
      }
    });
  if (!dbeta.empty()) std::copy(sum_dy, sum_dy + c, dbeta.data());
  if (!dgamma.empty()) std::copy(sum_dy_xhat, sum_dy_xhat + c, dgamma.data());
  if (dx.empty()) return;
  const float inv_r = 1.0f / static_cast<float>(r);
  parallel_for(r, rows_per_chunk(c), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const float* in = x.data() + i * c;
      const float* g = dy.data() + i * c;
      float* out = dx.data() + i * c;
      for (int64_t j = 0; j < c; ++j)
        out[j] = kernels::batch_norm_dx(in[j], g[j], mean.data()[j], rstd[j],
                                        gamma.empty() ? 1.0f : gamma.data()[j], batch_stats,
                                        sum_dy[j], sum_dy_xhat[j], inv_r);
    }
  });
}

void CpuBackend::layer_norm_forward(ConstTensorView x, ConstTensorView gamma, ConstTensorView beta,
                                    float epsilon, TensorView y, TensorView mean, TensorView rstd) {
  const int64_t r = mean.size(), c = x.size() / std::max<int64_t>(1, r);
  parallel_for(r, rows_per_chunk(c), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      kernels::layer_norm_row(x.data() + i * c, c, or_null(gamma), or_null(beta), epsilon,
                              y.data() + i * c, mean.data() + i, rstd.data() + i);
  });
}

void CpuBackend::layer_norm_backward(ConstTensorView x, ConstTensorView gamma, ConstTensorView mean,
                                     ConstTensorView rstd, ConstTensorView dy, TensorView dx,
                                     TensorView dgamma, TensorView dbeta) {
  const int64_t r = mean.size(), c = x.size() / std::max<int64_t>(1, r);
  if (!dx.empty())
    parallel_for(r, rows_per_chunk(c), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i)
        kernels::layer_norm_backward_row(x.data() + i * c, c, or_null(gamma), mean.data()[i],
                                         rstd.data()[i], dy.data() + i * c, dx.data() + i * c);
    });
  if (dgamma.empty() && dbeta.empty()) return;
  parallel_for(c, channel_grain(r), [&](int64_t b, int64_t e) {
    if (!dgamma.empty()) std::fill(dgamma.data() + b, dgamma.data() + e, 0.0f);
    if (!dbeta.empty()) std::fill(dbeta.data() + b, dbeta.data() + e, 0.0f);
    for (int64_t i = 0; i < r; ++i) {
      const float* in = x.data() + i * c;
      const float* g = dy.data() + i * c;
      const float m = mean.data()[i], s = rstd.data()[i];
      if (!dgamma.empty())
        for (int64_t j = b; j < e; ++j)
          dgamma.data()[j] += g[j] * ((in[j] - m) * s);
      if (!dbeta.empty())
        for (int64_t j = b; j < e; ++j)
          dbeta.data()[j] += g[j];
    }
  });
}

}  // namespace troupe::core
