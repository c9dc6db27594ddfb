// The CPU's loss kernel of the layer graph (Backend::loss): the losses of Keras's compile()
// through core/kernels/loss.hpp's bodies (shared with the CUDA backend), and, for the logits
// forms of binary and sparse categorical cross-entropy, the backend's own sigmoid and
// softmax cross-entropy (core/cpu/losses.cpp: the same formulas). Sums go through fixed
// blocks, each summed in double and added in order, so a loss does not depend on how many
// intra-op threads computed it.
#include <algorithm>
#include <vector>

#include "core/cpu/cpu_backend.hpp"
#include "core/kernels/loss.hpp"
#include "core/parallel.hpp"

namespace troupe::core {

namespace {

// Elements per block of a sum (and below which a thread's wake-up is not worth it).
constexpr int64_t kBlock = int64_t{1} << 14;

// The sum of fn(i) over [0, n) in blocks of `block` indices, blocks split over the intra-op
// threads.
template <class F>
double blocked_sum(int64_t n, int64_t block, const F& fn) {
  const int64_t blocks = (n + block - 1) / block;
  thread_local std::vector<double> partial;
  partial.assign(static_cast<size_t>(blocks), 0.0);
  parallel_for(blocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      double s = 0.0;
      const int64_t end = std::min(n, (b + 1) * block);
      for (int64_t i = b * block; i < end; ++i)
        s += static_cast<double>(fn(i));
      partial[static_cast<size_t>(b)] = s;
    }
  });
  double total = 0.0;
  for (double s : partial)
    total += s;
  return total;
}

}  // namespace

double CpuBackend::loss(LossKind k, ConstTensorView pred, ConstTensorView labels, TensorView grad,
                        float grad_scale) {
  const int64_t n = pred.size();
  if (n == 0) return 0.0;
  const Shape& s = pred.shape();
  const int64_t c = s.rank() == 0 ? 1 : s[s.rank() - 1];
  const int64_t rows = n / c;
  const float* p = pred.data();
  float* g = grad.data();
  switch (k) {
    case LossKind::binary_crossentropy_logits:
      return sigmoid_cross_entropy(pred, labels, grad, grad_scale);
    case LossKind::sparse_categorical_crossentropy_logits: {
      thread_local Tensor probs;
      probs.resize(Shape{rows, c});
      return softmax_cross_entropy(pred.reshaped(Shape{rows, c}), labels, probs,
                                   grad.reshaped(Shape{rows, c}), grad_scale);
    }
    case LossKind::binary_crossentropy:
    case LossKind::mean_squared_error: {
      const float* t = labels.data();
      const float scale = grad_scale / static_cast<float>(n);
      const bool bce = k == LossKind::binary_crossentropy;
      const double sum = blocked_sum(n, kBlock, [&](int64_t i) {
        return bce ? kernels::binary_crossentropy(p[i], t[i], scale, g + i)
                   : kernels::squared_error(p[i], t[i], scale, g + i);
      });
      return sum / static_cast<double>(n);
    }
    case LossKind::categorical_crossentropy:
    case LossKind::categorical_crossentropy_logits:
    case LossKind::sparse_categorical_crossentropy: {
      const bool sparse = loss_takes_classes(k);
      const bool logits = k == LossKind::categorical_crossentropy_logits;
      const float* t = sparse ? nullptr : labels.data();
      const int32_t* y = sparse ? labels.data_as<int32_t>() : nullptr;
      const float scale = grad_scale / static_cast<float>(rows);
      const double sum = blocked_sum(rows, std::max<int64_t>(1, kBlock / c), [&](int64_t r) {
        return kernels::categorical_crossentropy_row(p + r * c, sparse ? nullptr : t + r * c,
                                                     sparse ? y[r] : 0, c, logits, scale,
                                                     g + r * c);
      });
      return sum / static_cast<double>(rows);
    }
  }
  return 0.0;
}

}  // namespace troupe::core
