// The CPU's kernels of the click-through-rate models' embedding part (core/nn/ctr_model.hpp):
// per example (core/kernels/ctr_forward.hpp, the CUDA backend's too), the linear term, the
// field embeddings e_f = v[id_f] x_f, their sum and the FM term; backward, their gradients
// summed into the rows each example used.
#include <algorithm>

#include "core/cpu/cpu_backend.hpp"
#include "core/kernels/ctr_forward.hpp"
#include "core/parallel.hpp"

namespace troupe::core {

namespace {
constexpr int64_t kExampleGrain = 64;  // examples per intra-op chunk at least
constexpr int64_t kRowsAhead = 32;     // rows prefetched ahead of the scatter
}  // namespace

void CpuBackend::ctr_forward(const CtrArgs& a) {
  const kernels::CtrShape s{a.n, a.fields, a.dim, a.dense, a.width, a.fm};
  const float* values = a.values.data();
  const int32_t* index = a.index.data_as<int32_t>();
  // Examples in parallel (intra-op threads): each writes only its own row.
  parallel_for(a.n, kExampleGrain, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i)
      kernels::ctr_forward(i, s, values, index, a.rows.data(), a.features.data(), a.bias.data(),
                           a.dense_w.data(), a.dnn_in.data(), a.sum.data(), a.logits.data());
  });
}

void CpuBackend::ctr_backward(const CtrArgs& a, const CtrGradArgs& g) {
  const int64_t n = a.n, F = a.fields, k = a.dim, D = a.dense, W = a.width;
  const int64_t stride = F * k + D;
  const float* values = a.values.data();
  const int32_t* index = a.index.data_as<int32_t>();
  const float* dlogits = g.dlogits.data();
  g.dbias[0] = 0.0f;
  if (D > 0) std::fill_n(g.ddense_w.data(), D, 0.0f);
  for (int64_t i = 0; i < n; ++i) {
    const float gi = dlogits[i];
    g.dbias[0] += gi;
    for (int64_t j = 0; j < D; ++j)
      g.ddense_w[j] += gi * a.features.data()[i * D + j];
  }
  // d(loss)/d(e_if) for every example and field, in parallel; then summed into the rows
  // (rows are shared between examples, so that part stays on one thread).
  if (W > 1) {
    parallel_for(n, kExampleGrain, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        const float gi = dlogits[i];
        const float* s = a.sum.data() + i * k;
        for (int64_t f = 0; f < F; ++f) {
          const float* ef = a.dnn_in.data() + i * stride + f * k;
          const float* dxf = g.ddnn_in.empty() ? nullptr : g.ddnn_in.data() + i * stride + f * k;
          float* de = g.demb.data() + (i * F + f) * k;
          for (int64_t j = 0; j < k; ++j) {
            float d = 0.0f;
            if (a.fm) d += gi * (s[j] - ef[j]);
            if (dxf != nullptr) d += dxf[j];
            de[j] = d;
          }
        }
      }
    });
  }
  std::fill_n(g.row_grads.data(), g.row_grads.size(), 0.0f);
  for (int64_t i = 0; i < n; ++i) {
    const float gi = dlogits[i];
    for (int64_t f = 0; f < F; ++f) {
      const int64_t at = i * F + f;
      const float x = values[at];
      float* grow = g.row_grads.data() + static_cast<int64_t>(index[at]) * W;
      // Scattered over rows larger than the cache, as the forward pass gathers them.
      if (at + kRowsAhead < n * F) {
        float* ahead = g.row_grads.data() + static_cast<int64_t>(index[at + kRowsAhead]) * W;
        __builtin_prefetch(ahead, 1);
        __builtin_prefetch(ahead + W - 1, 1);
      }
      grow[0] += gi * x;
      if (W == 1) continue;
      const float* de = g.demb.data() + (i * F + f) * k;
      for (int64_t j = 0; j < k; ++j)
        grow[1 + j] += de[j] * x;
    }
  }
}

}  // namespace troupe::core
