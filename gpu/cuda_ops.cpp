// The CUDA backend's kernels other than matrix products: element-wise layers, losses,
// metrics, optimizers, row gathers and the CTR models' embedding part (gpu/kernels).
#include <cmath>

#include "gpu/cuda_backend.hpp"
#include "gpu/kernels/launch.hpp"
#include "gpu/kernels/optimizer_step.hpp"

namespace troupe::gpu {

namespace {

float* slot(const std::vector<core::TensorView>& slots, size_t i) {
  return i < slots.size() ? slots[i].data() : nullptr;
}

}  // namespace

void CudaBackend::relu_forward(core::ConstTensorView x, core::TensorView y) {
  TROUPE_GPU_KERNEL(launch::relu_forward(stream_, x.data(), y.data(), x.size()));
}

void CudaBackend::relu_backward(core::ConstTensorView y, core::ConstTensorView dy,
                                core::TensorView dx) {
  TROUPE_GPU_KERNEL(launch::relu_backward(stream_, y.data(), dy.data(), dx.data(), y.size()));
}

void CudaBackend::add(core::ConstTensorView x, core::TensorView y) {
  TROUPE_GPU_KERNEL(launch::add(stream_, x.data(), y.data(), x.size()));
}

void CudaBackend::scale(core::TensorView x, float factor) {
  TROUPE_GPU_KERNEL(launch::scale(stream_, x.data(), factor, x.size()));
}

void CudaBackend::convert(core::ConstTensorView src, core::TensorView dst) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  if (broken()) return;
  set_device();
  if (src.dtype() == dst.dtype()) {
    TROUPE_GPU_TRY(
        cudaMemcpyAsync(dst.data(), src.data(), src.bytes(), cudaMemcpyDeviceToDevice, stream_));
    return;
  }
  auto type = [](core::DType t) { return t == core::DType::bfloat16 ? 1 : 2; };
  if (src.dtype() == core::DType::float32) {
    TROUPE_GPU_TRY(launch::to_half(stream_, src.data(), dst.data_as<uint16_t>(), src.size(),
                                   type(dst.dtype())));
  } else if (dst.dtype() == core::DType::float32) {
    TROUPE_GPU_TRY(launch::from_half(stream_, src.data_as<uint16_t>(), dst.data(), src.size(),
                                     type(src.dtype())));
  } else {  // between the 16-bit types, through float32 scratch
    auto* f = static_cast<float*>(scratch(12, static_cast<size_t>(src.size()) * 4));
    TROUPE_GPU_TRY(
        launch::from_half(stream_, src.data_as<uint16_t>(), f, src.size(), type(src.dtype())));
    TROUPE_GPU_TRY(
        launch::to_half(stream_, f, dst.data_as<uint16_t>(), src.size(), type(dst.dtype())));
  }
}

bool CudaBackend::all_finite(const std::vector<core::ConstTensorView>& xs) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  if (broken()) return false;
  set_device();
  int* flag = static_cast<int*>(counters_.get());
  TROUPE_GPU_TRY(cudaMemsetAsync(flag, 0, sizeof(int), stream_), false);
  for (const auto& x : xs)
    TROUPE_GPU_TRY(launch::check_finite(stream_, x.data(), x.size(), flag), false);
  int host = 1;
  copy(&host, core::Device::cpu(), flag, device(), sizeof host);
  return !broken() && host == 0;
}

double CudaBackend::softmax_cross_entropy(core::ConstTensorView logits,
                                          core::ConstTensorView labels, core::TensorView probs,
                                          core::TensorView grad, float grad_scale) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  if (broken()) return std::nan("");
  set_device();
  const int64_t n = logits.shape()[0], c = logits.shape()[1];
  auto* sum = static_cast<double*>(counters_.get());
  TROUPE_GPU_TRY(cudaMemsetAsync(sum, 0, sizeof(double), stream_), std::nan(""));
  const float inv_n = n > 0 ? grad_scale / static_cast<float>(n) : 0.0f;
  TROUPE_GPU_TRY(launch::softmax_cross_entropy(stream_, logits.data(), labels.data_as<int32_t>(),
                                               probs.data(), grad.data(), sum, n, c, inv_n),
                 std::nan(""));
  double host = 0.0;
  copy(&host, core::Device::cpu(), sum, device(), sizeof host);
  if (broken()) return std::nan("");
  return n > 0 ? host / static_cast<double>(n) : 0.0;
}

double CudaBackend::sigmoid_cross_entropy(core::ConstTensorView logits,
                                          core::ConstTensorView labels, core::TensorView grad,
                                          float grad_scale) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  if (broken()) return std::nan("");
  set_device();
  const int64_t n = logits.size();
  auto* sum = static_cast<double*>(counters_.get());
  TROUPE_GPU_TRY(cudaMemsetAsync(sum, 0, sizeof(double), stream_), std::nan(""));
  const float inv_n = n > 0 ? grad_scale / static_cast<float>(n) : 0.0f;
  TROUPE_GPU_TRY(launch::sigmoid_cross_entropy(stream_, logits.data(), labels.data(), grad.data(),
                                               sum, n, inv_n),
                 std::nan(""));
  double host = 0.0;
  copy(&host, core::Device::cpu(), sum, device(), sizeof host);
  if (broken()) return std::nan("");
  return n > 0 ? host / static_cast<double>(n) : 0.0;
}

int64_t CudaBackend::count_correct(core::ConstTensorView logits, core::ConstTensorView labels) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  if (broken()) return 0;
  set_device();
  auto* correct = static_cast<unsigned long long*>(counters_.get());
  TROUPE_GPU_TRY(cudaMemsetAsync(correct, 0, sizeof *correct, stream_), 0);
  TROUPE_GPU_TRY(launch::count_correct(stream_, logits.data(), labels.data_as<int32_t>(), correct,
                                       logits.shape()[0], logits.shape()[1]),
                 0);
  unsigned long long host = 0;
  copy(&host, core::Device::cpu(), correct, device(), sizeof host);
  return static_cast<int64_t>(host);
}

int64_t CudaBackend::binary_metrics(core::ConstTensorView logits, core::ConstTensorView labels,
                                    std::vector<int64_t>& pos, std::vector<int64_t>& neg) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  if (broken()) return 0;
  set_device();
  const auto buckets = static_cast<int64_t>(pos.size());
  const size_t bytes = static_cast<size_t>(2 * buckets + 1) * sizeof(unsigned long long);
  auto* counts = static_cast<unsigned long long*>(scratch(13, bytes));
  TROUPE_GPU_TRY(cudaMemsetAsync(counts, 0, bytes, stream_), 0);
  TROUPE_GPU_TRY(
      launch::binary_metrics(stream_, logits.data(), labels.data(), counts, counts + buckets,
                             counts + 2 * buckets, logits.size(), buckets),
      0);
  std::vector<unsigned long long> host(static_cast<size_t>(2 * buckets + 1));
  copy(host.data(), core::Device::cpu(), counts, device(), bytes);
  for (int64_t b = 0; b < buckets; ++b) {
    pos[static_cast<size_t>(b)] += static_cast<int64_t>(host[static_cast<size_t>(b)]);
    neg[static_cast<size_t>(b)] += static_cast<int64_t>(host[static_cast<size_t>(buckets + b)]);
  }
  return static_cast<int64_t>(host.back());
}

void CudaBackend::apply_dense(const core::OptimizerConfig& c, core::TensorView w,
                              core::ConstTensorView g, const std::vector<core::TensorView>& slots,
                              int64_t t) {
  TROUPE_GPU_KERNEL(launch::optimizer_dense(stream_, kernels::optimizer_step(c, t), w.data(),
                                            g.data(), slot(slots, 0), slot(slots, 1), w.size()));
}

void CudaBackend::apply_rows(const core::OptimizerConfig& c, core::TensorView w,
                             core::ConstTensorView rows, core::ConstTensorView grad_rows,
                             const std::vector<core::TensorView>& slots, int64_t t) {
  TROUPE_GPU_KERNEL(launch::optimizer_rows(
      stream_, kernels::optimizer_step(c, t), rows.data_as<int64_t>(), rows.size(),
      w.shape().row_size(), w.data(), grad_rows.data(), slot(slots, 0), slot(slots, 1)));
}

}  // namespace troupe::gpu
