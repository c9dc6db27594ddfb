#pragma once

// Bodies of the loss and metric kernels: one call per example (a row of logits).

#include "gpu/kernels/hd.cuh"

namespace troupe::gpu::kernels {

/// Softmax cross-entropy of row i of logits [n, c] against its label: probabilities, the
/// gradient d(mean loss)/d(logits) times `scale` (inv_n_scale = scale / n), and the row's
/// loss added to *loss_sum.
TROUPE_HD inline void softmax_cross_entropy(int64_t i, const float* logits, const int32_t* labels,
                                            float* probs, float* grad, double* loss_sum, int64_t c,
                                            float inv_n_scale) {
  const float* z = logits + i * c;
  float* p = probs + i * c;
  float* g = grad + i * c;
  float m = z[0];
  for (int64_t j = 1; j < c; ++j)
    m = z[j] > m ? z[j] : m;
  float sum = 0.0f;
  for (int64_t j = 0; j < c; ++j) {
    p[j] = expf(z[j] - m);
    sum += p[j];
  }
  for (int64_t j = 0; j < c; ++j) {
    p[j] /= sum;
    g[j] = p[j] * inv_n_scale;
  }
  const int32_t y = labels[i];
  g[y] -= inv_n_scale;
  // -log_softmax, as Keras computes it: exact where the probability underflows.
  atomic_add(loss_sum, -static_cast<double>((z[y] - m) - logf(sum)));
}

/// Sigmoid binary cross-entropy of example i, in the overflow-free form.
TROUPE_HD inline void sigmoid_cross_entropy(int64_t i, const float* logits, const float* labels,
                                            float* grad, double* loss_sum, float inv_n_scale) {
  const float z = logits[i], y = labels[i];
  const float l = (z > 0.0f ? z : 0.0f) - z * y + log1pf(expf(-fabsf(z)));
  grad[i] = (1.0f / (1.0f + expf(-z)) - y) * inv_n_scale;
  atomic_add(loss_sum, static_cast<double>(l));
}

/// Counts example i when its largest logit (the first of equal ones) is its label.
TROUPE_HD inline void count_correct(int64_t i, const float* logits, const int32_t* labels,
                                    unsigned long long* correct, int64_t c) {
  const float* z = logits + i * c;
  int64_t arg = 0;
  for (int64_t j = 1; j < c; ++j)
    if (z[j] > z[arg]) arg = j;
  if (arg == labels[i]) atomic_add(correct, 1ull);
}

/// Example i into the AUC's histograms of positives and negatives (`buckets` equal buckets
/// of [0, 1], core::AUC's) and the binary accuracy's count.
TROUPE_HD inline void binary_metrics(int64_t i, const float* logits, const float* labels,
                                     unsigned long long* pos, unsigned long long* neg,
                                     unsigned long long* correct, int64_t buckets) {
  const float p = 1.0f / (1.0f + expf(-logits[i]));
  const bool positive = labels[i] > 0.5f;
  if ((p > 0.5f) == positive) atomic_add(correct, 1ull);
  int64_t b = static_cast<int64_t>(p * static_cast<float>(buckets));
  b = b < 0 ? 0 : (b >= buckets ? buckets - 1 : b);
  atomic_add(positive ? pos + b : neg + b, 1ull);
}

}  // namespace troupe::gpu::kernels
