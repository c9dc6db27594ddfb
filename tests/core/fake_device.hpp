#pragma once

// A stand-in "cuda" device for machines without a GPU: its memory is host memory of its
// own (tagged cuda:N, so host code that treats it as CPU data trips the views' checks) and
// its kernels are the CPU backend's. What it proves is the device pathway around the
// kernels: tensors made, moved and copied through a backend, batches and labels copied to
// the device, every layer, loss, metric and optimizer dispatched there, results read back
// through copies, and select_device's choices and errors. The CUDA kernels themselves are
// gpu/'s (tests/gpu).
//
//   FakeCuda fake(2);            // registered for DeviceKind::cuda until it goes
//   model->to(Device::cuda(1));

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/backend.hpp"
#include "core/cpu/cpu_backend.hpp"

namespace troupe::test {

class HostBackedBackend final : public core::Backend {
 public:
  explicit HostBackedBackend(core::Device d) : device_(d) {}
  core::Device device() const override { return device_; }
  std::string name() const override { return "fake " + device_.to_string(); }
  bool fast(core::Precision p) const override { return p != core::Precision::mixed_float16; }

  core::DeviceMemory allocate(size_t bytes) override {
    ++allocations;
    // 64-byte aligned as the CPU's tensors are: Eigen's vectorized loops then split the
    // same way, and results match bit for bit.
    const size_t rounded = (bytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
    std::memset(p, 0, rounded == 0 ? 64 : rounded);
    return core::DeviceMemory(p, core::DeviceFree{this});
  }
  void deallocate(void* p) override { std::free(p); }
  void copy(void* dst, core::Device dst_device, const void* src, core::Device src_device,
            size_t bytes) override {
    TROUPE_ASSERT((dst_device.is_cpu() || dst_device == device_) &&
                      (src_device.is_cpu() || src_device == device_),
                  "a copy through the wrong device's backend");
    if (dst_device != src_device) ++transfers;
    std::memmove(dst, src, bytes);
  }
  void fill(core::TensorView x, float v) override { cpu_.fill(h(x), v); }
  core::Status synchronize() override { return {}; }

  void dense_forward(core::ConstTensorView x, core::ConstTensorView w, core::ConstTensorView b,
                     core::TensorView y, core::Precision p) override {
    cpu_.dense_forward(h(x), h(w), h(b), h(y), p);
  }
  void dense_backward(core::ConstTensorView x, core::ConstTensorView w, core::ConstTensorView dy,
                      core::TensorView dw, core::TensorView db, core::TensorView dx,
                      core::Precision p) override {
    cpu_.dense_backward(h(x), h(w), h(dy), h(dw), h(db), h(dx), p);
  }
  void dense_relu_forward(core::ConstTensorView x, core::ConstTensorView w, core::ConstTensorView b,
                          core::TensorView y, core::Precision p) override {
    cpu_.dense_relu_forward(h(x), h(w), h(b), h(y), p);
  }
  void dense_relu_backward(core::ConstTensorView x, core::ConstTensorView w,
                           core::ConstTensorView y, core::ConstTensorView dy, core::TensorView dz,
                           core::TensorView dw, core::TensorView db, core::TensorView dx,
                           core::Precision p) override {
    cpu_.dense_relu_backward(h(x), h(w), h(y), h(dy), h(dz), h(dw), h(db), h(dx), p);
  }
  void relu_forward(core::ConstTensorView x, core::TensorView y) override {
    cpu_.relu_forward(h(x), h(y));
  }
  void relu_backward(core::ConstTensorView y, core::ConstTensorView dy,
                     core::TensorView dx) override {
    cpu_.relu_backward(h(y), h(dy), h(dx));
  }
  void add(core::ConstTensorView x, core::TensorView y) override { cpu_.add(h(x), h(y)); }
  void scale(core::TensorView x, float f) override { cpu_.scale(h(x), f); }
  bool all_finite(const std::vector<core::ConstTensorView>& xs) override {
    std::vector<core::ConstTensorView> hs;
    for (const auto& x : xs)
      hs.push_back(h(x));
    return cpu_.all_finite(hs);
  }
  void convert(core::ConstTensorView src, core::TensorView dst) override {
    cpu_.convert(h(src), h(dst));
  }
  double softmax_cross_entropy(core::ConstTensorView logits, core::ConstTensorView labels,
                               core::TensorView probs, core::TensorView grad,
                               float scale) override {
    return cpu_.softmax_cross_entropy(h(logits), h(labels), h(probs), h(grad), scale);
  }
  double sigmoid_cross_entropy(core::ConstTensorView logits, core::ConstTensorView labels,
                               core::TensorView grad, float scale) override {
    return cpu_.sigmoid_cross_entropy(h(logits), h(labels), h(grad), scale);
  }
  int64_t count_correct(core::ConstTensorView logits, core::ConstTensorView labels) override {
    return cpu_.count_correct(h(logits), h(labels));
  }
  int64_t binary_metrics(core::ConstTensorView logits, core::ConstTensorView labels,
                         std::vector<int64_t>& pos, std::vector<int64_t>& neg) override {
    return cpu_.binary_metrics(h(logits), h(labels), pos, neg);
  }
  void apply_dense(const core::OptimizerConfig& c, core::TensorView w, core::ConstTensorView g,
                   const std::vector<core::TensorView>& slots, int64_t t) override {
    cpu_.apply_dense(c, h(w), h(g), hs(slots), t);
  }
  void apply_rows(const core::OptimizerConfig& c, core::TensorView w, core::ConstTensorView rows,
                  core::ConstTensorView grad_rows, const std::vector<core::TensorView>& slots,
                  int64_t t) override {
    cpu_.apply_rows(c, h(w), h(rows), h(grad_rows), hs(slots), t);
  }
  // layer graph: basic
  void activation_forward(core::ActFn f, core::ConstTensorView x, core::TensorView y) override {
    cpu_.activation_forward(f, h(x), h(y));
  }
  void activation_backward(core::ActFn f, core::ConstTensorView x, core::ConstTensorView y,
                           core::ConstTensorView dy, core::TensorView dx) override {
    cpu_.activation_backward(f, h(x), h(y), h(dy), h(dx));
  }
  void axpby(float a, core::ConstTensorView x, float b, core::TensorView y) override {
    cpu_.axpby(a, h(x), b, h(y));
  }
  void multiply(core::ConstTensorView x1, core::ConstTensorView x2, core::TensorView y,
                bool accumulate) override {
    cpu_.multiply(h(x1), h(x2), h(y), accumulate);
  }
  void copy_columns(core::ConstTensorView src, core::TensorView dst, int64_t offset,
                    bool accumulate) override {
    cpu_.copy_columns(h(src), h(dst), offset, accumulate);
  }
  void take_columns(core::ConstTensorView src, int64_t offset, core::TensorView dst) override {
    cpu_.take_columns(h(src), offset, h(dst));
  }
  void reduce_middle(core::Reduce op, core::ConstTensorView x, core::TensorView y) override {
    cpu_.reduce_middle(op, h(x), h(y));
  }
  void reduce_middle_backward(core::Reduce op, core::ConstTensorView x, core::ConstTensorView y,
                              core::ConstTensorView dy, core::TensorView dx) override {
    cpu_.reduce_middle_backward(op, h(x), h(y), h(dy), h(dx));
  }
  void row_dot(core::ConstTensorView x1, core::ConstTensorView x2, core::TensorView y) override {
    cpu_.row_dot(h(x1), h(x2), h(y));
  }
  void scale_rows(core::ConstTensorView x, core::ConstTensorView s, core::TensorView y,
                  bool accumulate) override {
    cpu_.scale_rows(h(x), h(s), h(y), accumulate);
  }
  void column_sums(core::ConstTensorView x, core::TensorView y, bool accumulate) override {
    cpu_.column_sums(h(x), h(y), accumulate);
  }
  void moments(core::ConstTensorView x, core::TensorView mean, core::TensorView var) override {
    cpu_.moments(h(x), h(mean), h(var));
  }
  void batch_norm_forward(core::ConstTensorView x, core::ConstTensorView mean,
                          core::ConstTensorView var, core::ConstTensorView gamma,
                          core::ConstTensorView beta, float epsilon, core::TensorView y) override {
    cpu_.batch_norm_forward(h(x), h(mean), h(var), h(gamma), h(beta), epsilon, h(y));
  }
  void batch_norm_backward(core::ConstTensorView x, core::ConstTensorView mean,
                           core::ConstTensorView var, core::ConstTensorView gamma, float epsilon,
                           bool batch_stats, core::ConstTensorView dy, core::TensorView dx,
                           core::TensorView dgamma, core::TensorView dbeta) override {
    cpu_.batch_norm_backward(h(x), h(mean), h(var), h(gamma), epsilon, batch_stats, h(dy), h(dx),
                             h(dgamma), h(dbeta));
  }
  void layer_norm_forward(core::ConstTensorView x, core::ConstTensorView gamma,
                          core::ConstTensorView beta, float epsilon, core::TensorView y,
                          core::TensorView mean, core::TensorView rstd) override {
    cpu_.layer_norm_forward(h(x), h(gamma), h(beta), epsilon, h(y), h(mean), h(rstd));
  }
  void layer_norm_backward(core::ConstTensorView x, core::ConstTensorView gamma,
                           core::ConstTensorView mean, core::ConstTensorView rstd,
                           core::ConstTensorView dy, core::TensorView dx, core::TensorView dgamma,
                           core::TensorView dbeta) override {
    cpu_.layer_norm_backward(h(x), h(gamma), h(mean), h(rstd), h(dy), h(dx), h(dgamma), h(dbeta));
  }
  void dropout_forward(core::ConstTensorView x, core::TensorView y, float rate,
                       uint64_t seed) override {
    cpu_.dropout_forward(h(x), h(y), rate, seed);
  }
  void dropout_backward(core::ConstTensorView dy, core::TensorView dx, float rate,
                        uint64_t seed) override {
    cpu_.dropout_backward(h(dy), h(dx), rate, seed);
  }
  double loss(core::LossKind k, core::ConstTensorView pred, core::ConstTensorView labels,
              core::TensorView grad, float grad_scale) override {
    return cpu_.loss(k, h(pred), h(labels), h(grad), grad_scale);
  }
  // layer graph: sparse
  void conv2d_forward(const core::Conv2dGeometry& g, core::ConstTensorView x,
                      core::ConstTensorView w, core::ConstTensorView b, core::TensorView y,
                      std::unique_ptr<core::Workspace>& ws, core::Precision p) override {
    cpu_.conv2d_forward(g, h(x), h(w), h(b), h(y), ws, p);
  }
  void conv2d_backward(const core::Conv2dGeometry& g, core::ConstTensorView x,
                       core::ConstTensorView w, core::ConstTensorView dy, core::TensorView dw,
                       core::TensorView db, core::TensorView dx,
                       std::unique_ptr<core::Workspace>& ws, core::Precision p) override {
    cpu_.conv2d_backward(g, h(x), h(w), h(dy), h(dw), h(db), h(dx), ws, p);
  }
  void pool2d_forward(core::PoolKind k, const core::Pool2dGeometry& g, core::ConstTensorView x,
                      core::TensorView y) override {
    cpu_.pool2d_forward(k, g, h(x), h(y));
  }
  void pool2d_backward(core::PoolKind k, const core::Pool2dGeometry& g, core::ConstTensorView x,
                       core::ConstTensorView y, core::ConstTensorView dy,
                       core::TensorView dx) override {
    cpu_.pool2d_backward(k, g, h(x), h(y), h(dy), h(dx));
  }
  void fm_forward(core::ConstTensorView x, core::TensorView y) override {
    cpu_.fm_forward(h(x), h(y));
  }
  void fm_backward(core::ConstTensorView x, core::ConstTensorView dy,
                   core::TensorView dx) override {
    cpu_.fm_backward(h(x), h(dy), h(dx));
  }
  void gather_index(core::ConstTensorView rows, core::ConstTensorView index,
                    core::TensorView y) override {
    cpu_.gather_index(h(rows), h(index), h(y));
  }
  void scatter_add_index(core::ConstTensorView dy, core::ConstTensorView index,
                         core::TensorView grads) override {
    cpu_.scatter_add_index(h(dy), h(index), h(grads));
  }

  // Generic kernels: the CPU's bodies, the same index functions the CUDA backend launches.
  void elementwise(core::ElementOp op, const std::vector<core::ConstTensorView>& in,
                   core::TensorView y) override {
    cpu_.elementwise(op, hs(in), h(y));
  }
  void elementwise_backward(core::ElementOp op, int which,
                            const std::vector<core::ConstTensorView>& in, core::ConstTensorView y,
                            core::ConstTensorView dy, core::TensorView dx,
                            bool accumulate) override {
    cpu_.elementwise_backward(op, which, hs(in), h(y), h(dy), h(dx), accumulate);
  }
  void reduce(core::Reduce op, core::ConstTensorView x, core::TensorView y) override {
    cpu_.reduce(op, h(x), h(y));
  }
  void reduce_backward(core::Reduce op, core::ConstTensorView x, core::ConstTensorView y,
                       core::ConstTensorView dy, core::TensorView dx, bool accumulate) override {
    cpu_.reduce_backward(op, h(x), h(y), h(dy), h(dx), accumulate);
  }
  void copy_strided(const core::kernels::IndexSpace<2>& at, core::ConstTensorView src,
                    core::TensorView dst, bool accumulate) override {
    cpu_.copy_strided(at, h(src), h(dst), accumulate);
  }
  void matmul(const core::MatmulGeometry& g, core::ConstTensorView a, core::ConstTensorView b,
              core::TensorView y, core::Precision p) override {
    cpu_.matmul(g, h(a), h(b), h(y), p);
  }
  void gather(core::ConstTensorView x, core::ConstTensorView index, core::TensorView y) override {
    cpu_.gather(h(x), h(index), h(y));
  }
  void gather_backward(core::ConstTensorView dy, core::ConstTensorView index, core::TensorView dx,
                       bool accumulate) override {
    cpu_.gather_backward(h(dy), h(index), h(dx), accumulate);
  }

  /// Every kernel family but those in `lacks` (a test of placing a model where one is
  /// missing).
  bool has(core::Kernel k) const override {
    for (auto l : lacks)
      if (l == k) return false;
    return true;
  }
  std::vector<core::Kernel> lacks;

  std::atomic<int64_t> allocations{0};
  std::atomic<int64_t> transfers{0};  // copies between the host and this device

 private:
  // A view of this device's data as the CPU kernels take it; it must be this device's.
  template <class T>
  core::BasicTensorView<T> h(core::BasicTensorView<T> v) const {
    if (v.empty()) return v;
    TROUPE_ASSERT(v.device() == device_, "a kernel on the fake device got another device's view");
    return {v.data(), v.shape(), core::Device::cpu(), v.dtype()};
  }
  template <class T>
  std::vector<core::BasicTensorView<T>> hs(const std::vector<core::BasicTensorView<T>>& vs) const {
    std::vector<core::BasicTensorView<T>> out;
    for (const auto& v : vs)
      out.push_back(h(v));
    return out;
  }
  core::Device device_;
  core::CpuBackend cpu_;
};

/// Registers `count` fake CUDA devices for its lifetime (then puts back what was there).
class FakeCuda final : public core::DeviceProvider {
 public:
  explicit FakeCuda(int count) : previous_(core::device_provider(core::DeviceKind::cuda)) {
    for (int i = 0; i < count; ++i)
      backends_.push_back(std::make_unique<HostBackedBackend>(core::Device::cuda(i)));
    core::register_device_provider(core::DeviceKind::cuda, this);
  }
  ~FakeCuda() override { core::register_device_provider(core::DeviceKind::cuda, previous_); }
  FakeCuda(const FakeCuda&) = delete;
  FakeCuda& operator=(const FakeCuda&) = delete;

  int count() override { return static_cast<int>(backends_.size()); }
  std::string describe() override {
    return backends_.empty() ? "no fake CUDA device"
                             : std::to_string(backends_.size()) + " fake CUDA devices";
  }
  core::Expected<core::Backend*> backend(int index) override {
    return static_cast<core::Backend*>(backends_.at(static_cast<size_t>(index)).get());
  }
  HostBackedBackend& fake(int index) { return *backends_.at(static_cast<size_t>(index)); }

 private:
  core::DeviceProvider* previous_;
  std::vector<std::unique_ptr<HostBackedBackend>> backends_;
};

}  // namespace troupe::test
