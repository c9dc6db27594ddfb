// Launchers of the element-wise, loss, metric, optimizer and CTR bodies.
#include "core/kernels/grid.cuh"
#include "gpu/kernels/columns.cuh"
#include "gpu/kernels/elementwise.cuh"
#include "gpu/kernels/launch.hpp"
#include "gpu/kernels/loss.cuh"

namespace troupe::gpu::launch {

using core::kernels::grid::run;
namespace k = kernels;

cudaError_t relu_forward(cudaStream_t s, const float* x, float* y, int64_t n) {
  return run(s, n, [=] __device__(int64_t i) { k::relu_forward(i, x, y); });
}

cudaError_t relu_backward(cudaStream_t s, const float* y, const float* dy, float* dx, int64_t n) {
  return run(s, n, [=] __device__(int64_t i) { k::relu_backward(i, y, dy, dx); });
}

cudaError_t add(cudaStream_t s, const float* x, float* y, int64_t n) {
  return run(s, n, [=] __device__(int64_t i) { k::add(i, x, y); });
}

cudaError_t scale(cudaStream_t s, float* x, float factor, int64_t n) {
  return run(s, n, [=] __device__(int64_t i) { k::scale(i, x, factor); });
}

cudaError_t fill(cudaStream_t s, void* x, int64_t n, int element_bytes, uint64_t pattern) {
  switch (element_bytes) {
    case 2: {
      auto* p = static_cast<uint16_t*>(x);
      const auto v = static_cast<uint16_t>(pattern);
      return run(s, n, [=] __device__(int64_t i) { p[i] = v; });
    }
    case 4: {
      auto* p = static_cast<uint32_t*>(x);
      const auto v = static_cast<uint32_t>(pattern);
      return run(s, n, [=] __device__(int64_t i) { p[i] = v; });
    }
    default: {
      auto* p = static_cast<uint64_t*>(x);
      return run(s, n, [=] __device__(int64_t i) { p[i] = pattern; });
    }
  }
}

cudaError_t check_finite(cudaStream_t s, const float* x, int64_t n, int* flag) {
  return run(s, n, [=] __device__(int64_t i) { k::check_finite(i, x, flag); });
}

cudaError_t column_sum(cudaStream_t s, const float* x, const float* w, float* out, int64_t rows,
                       int64_t cols, bool accumulate) {
  return detail::run_columns<1>(s, rows, cols, k::WeightedColumns{x, w, cols},
                                [=] __device__(int64_t j, const float(&sum)[1]) {
                                  out[j] = accumulate ? out[j] + sum[0] : sum[0];
                                });
}

cudaError_t add_bias(cudaStream_t s, float* y, const float* b, int64_t n, int64_t channels) {
  return run(s, n, [=] __device__(int64_t i) { k::add_bias(i, y, b, channels); });
}

cudaError_t to_half(cudaStream_t s, const float* x, uint16_t* y, int64_t n, int t) {
  return run(s, n, [=] __device__(int64_t i) { k::to_half(i, x, y, t); });
}

cudaError_t from_half(cudaStream_t s, const uint16_t* x, float* y, int64_t n, int t) {
  return run(s, n, [=] __device__(int64_t i) { k::from_half(i, x, y, t); });
}

cudaError_t round_values(cudaStream_t s, const float* x, float* y, int64_t n, int t) {
  return run(s, n, [=] __device__(int64_t i) { k::round_values(i, x, y, t); });
}

cudaError_t hwio_to_ohwi(cudaStream_t s, const float* hwio, float* ohwi, int64_t khw, int64_t c,
                         int64_t f) {
  return run(s, khw * c * f,
             [=] __device__(int64_t i) { k::hwio_to_ohwi(i, hwio, ohwi, khw, c, f); });
}

cudaError_t ohwi_to_hwio(cudaStream_t s, const float* ohwi, float* hwio, int64_t khw, int64_t c,
                         int64_t f) {
  return run(s, khw * c * f,
             [=] __device__(int64_t i) { k::ohwi_to_hwio(i, ohwi, hwio, khw, c, f); });
}

cudaError_t softmax_cross_entropy(cudaStream_t s, const float* logits, const int32_t* labels,
                                  float* probs, float* grad, double* loss_sum, int64_t n, int64_t c,
                                  float inv_n_scale) {
  return run(s, n, [=] __device__(int64_t i) {
    k::softmax_cross_entropy(i, logits, labels, probs, grad, loss_sum, c, inv_n_scale);
  });
}

cudaError_t sigmoid_cross_entropy(cudaStream_t s, const float* logits, const float* labels,
                                  float* grad, double* loss_sum, int64_t n, float inv_n_scale) {
  return run(s, n, [=] __device__(int64_t i) {
    k::sigmoid_cross_entropy(i, logits, labels, grad, loss_sum, inv_n_scale);
  });
}

cudaError_t count_correct(cudaStream_t s, const float* logits, const int32_t* labels,
                          unsigned long long* correct, int64_t n, int64_t c) {
  return run(s, n, [=] __device__(int64_t i) { k::count_correct(i, logits, labels, correct, c); });
}

cudaError_t binary_metrics(cudaStream_t s, const float* logits, const float* labels,
                           unsigned long long* pos, unsigned long long* neg,
                           unsigned long long* correct, int64_t n, int64_t buckets) {
  return run(s, n, [=] __device__(int64_t i) {
    k::binary_metrics(i, logits, labels, pos, neg, correct, buckets);
  });
}

cudaError_t optimizer_dense(cudaStream_t s, const kernels::OptimizerStep& c, float* w,
                            const float* g, float* s0, float* s1, int64_t n) {
  const kernels::OptimizerStep step = c;
  return run(s, n, [=] __device__(int64_t i) { k::optimizer_update(step, i, i, w, g, s0, s1); });
}

cudaError_t optimizer_rows(cudaStream_t s, const kernels::OptimizerStep& c, const int64_t* rows,
                           int64_t count, int64_t width, float* w, const float* g, float* s0,
                           float* s1) {
  const kernels::OptimizerStep step = c;
  return run(s, count * width, [=] __device__(int64_t i) {
    k::optimizer_update_row(step, i, rows, width, w, g, s0, s1);
  });
}

}  // namespace troupe::gpu::launch
