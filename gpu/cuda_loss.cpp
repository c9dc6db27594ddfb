// The CUDA backend's loss kernel of the layer graph (Backend::loss): the losses of Keras's
// compile() through core/kernels/loss.hpp's bodies (gpu/kernels/keras_loss.cu), and, for
// the logits forms of binary and sparse categorical cross-entropy, this backend's own
// sigmoid and softmax cross-entropy (the same formulas). The mean comes back to the host:
// the call waits for the work queued before it.
#include <cmath>

#include "gpu/cuda_backend.hpp"
#include "gpu/kernels/keras_loss.hpp"

namespace troupe::gpu {

namespace {

// The scratch slot of sparse categorical cross-entropy's probabilities (the softmax kernel
// writes them; the loss does not need them).
constexpr int kProbsSlot = 40;

}  // namespace

double CudaBackend::loss(core::LossKind k, core::ConstTensorView pred, core::ConstTensorView labels,
                         core::TensorView grad, float grad_scale) {
  using core::LossKind;
  std::lock_guard<std::recursive_mutex> lock(mu_);
  if (broken()) return std::nan("");
  const int64_t n = pred.size();
  if (n == 0) return 0.0;
  const core::Shape& s = pred.shape();
  const int64_t c = s.rank() == 0 ? 1 : s[s.rank() - 1];
  const int64_t rows = n / c;
  if (k == LossKind::binary_crossentropy_logits)
    return sigmoid_cross_entropy(pred, labels, grad, grad_scale);
  if (k == LossKind::sparse_categorical_crossentropy_logits) {
    void* probs = scratch(kProbsSlot, static_cast<size_t>(n) * sizeof(float));
    if (broken()) return std::nan("");
    const core::TensorView probs_view(probs, core::Shape{rows, c}, device(), core::DType::float32);
    return softmax_cross_entropy(pred.reshaped(core::Shape{rows, c}), labels, probs_view,
                                 grad.reshaped(core::Shape{rows, c}), grad_scale);
  }
  set_device();
  auto* sum = static_cast<double*>(counters_.get());
  TROUPE_GPU_TRY(cudaMemsetAsync(sum, 0, sizeof(double), stream_), std::nan(""));
  int64_t count = n;
  switch (k) {
    case LossKind::binary_crossentropy:
    case LossKind::mean_squared_error:
      TROUPE_GPU_TRY(launch::keras_loss_elements(stream_, k == LossKind::binary_crossentropy,
                                                 pred.data(), labels.data(), grad.data(), sum, n,
                                                 grad_scale / static_cast<float>(n)),
                     std::nan(""));
      break;
    default: {
      const bool sparse = core::loss_takes_classes(k);
      count = rows;
      TROUPE_GPU_TRY(
          launch::keras_loss_rows(stream_, pred.data(), sparse ? nullptr : labels.data(),
                                  sparse ? labels.data_as<int32_t>() : nullptr, grad.data(), sum,
                                  rows, c, k == LossKind::categorical_crossentropy_logits,
                                  grad_scale / static_cast<float>(rows)),
          std::nan(""));
      break;
    }
  }
  double host = 0.0;
  copy(&host, core::Device::cpu(), sum, device(), sizeof host);
  if (broken()) return std::nan("");
  return host / static_cast<double>(count);
}

}  // namespace troupe::gpu
