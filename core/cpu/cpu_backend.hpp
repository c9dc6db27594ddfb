#pragma once

// The CPU backend: matrix products on oneDNN where the build has it (core/cpu/gemm.hpp),
// else Eigen, and plain loops, split over the intra-op threads (core/parallel.hpp) where
// the work is large enough. mixed_bfloat16 multiplies bfloat16 operands with float32
// accumulation on AVX512_BF16 (and is refused on a CPU without it); the other
// low-precision policies, and mixed_bfloat16 without oneDNN, round the operands as the
// policy's type holds them and multiply in float32: a reference for the GPU's kernels and
// for loss scaling, not a fast path (docs/architecture.md, "Devices and precision").

#include "core/backend.hpp"

namespace troupe::core {

class CpuBackend final : public Backend {
 public:
  Device device() const override { return Device::cpu(); }
  std::string name() const override;
  bool fast(Precision p) const override;
  Status supports(Precision p) const override;
  bool has(Kernel) const override { return true; }

  DeviceMemory allocate(size_t bytes) override;
  void deallocate(void* p) override;
  void copy(void* dst, Device dst_device, const void* src, Device src_device,
            size_t bytes) override;
  void fill(TensorView x, float value) override;
  Status synchronize() override { return {}; }

  void dense_forward(ConstTensorView x, ConstTensorView w, ConstTensorView b, TensorView y,
                     Precision p) override;
  void dense_backward(ConstTensorView x, ConstTensorView w, ConstTensorView dy, TensorView dw,
                      TensorView db, TensorView dx, Precision p) override;
  void dense_relu_forward(ConstTensorView x, ConstTensorView w, ConstTensorView b, TensorView y,
                          Precision p) override;
  void dense_relu_backward(ConstTensorView x, ConstTensorView w, ConstTensorView y,
                           ConstTensorView dy, TensorView dz, TensorView dw, TensorView db,
                           TensorView dx, Precision p) override;
  void relu_forward(ConstTensorView x, TensorView y) override;
  void relu_backward(ConstTensorView y, ConstTensorView dy, TensorView dx) override;
  void add(ConstTensorView x, TensorView y) override;
  void add_into(ConstTensorView a, ConstTensorView b, TensorView y) override;
  void scale(TensorView x, float factor) override;
  bool all_finite(const std::vector<ConstTensorView>& xs) override;
  void convert(ConstTensorView src, TensorView dst) override;

  double softmax_cross_entropy(ConstTensorView logits, ConstTensorView labels, TensorView probs,
                               TensorView grad, float grad_scale) override;
  double sigmoid_cross_entropy(ConstTensorView logits, ConstTensorView labels, TensorView grad,
                               float grad_scale) override;
  int64_t count_correct(ConstTensorView logits, ConstTensorView labels) override;
  int64_t binary_metrics(ConstTensorView logits, ConstTensorView labels, std::vector<int64_t>& pos,
                         std::vector<int64_t>& neg) override;

  void apply_dense(const OptimizerConfig& c, TensorView w, ConstTensorView g,
                   const std::vector<TensorView>& slots, int64_t t) override;
  void apply_rows(const OptimizerConfig& c, TensorView w, ConstTensorView rows,
                  ConstTensorView grad_rows, const std::vector<TensorView>& slots,
                  int64_t t) override;

  // layer graph: basic (core/cpu/layer_kernels.cpp, core/cpu/norm_kernels.cpp)
  void activation_forward(ActFn f, ConstTensorView x, TensorView y) override;
  void activation_backward(ActFn f, ConstTensorView x, ConstTensorView y, ConstTensorView dy,
                           TensorView dx) override;
  void axpby(float a, ConstTensorView x, float b, TensorView y) override;
  void multiply(ConstTensorView x1, ConstTensorView x2, TensorView y, bool accumulate) override;
  void copy_columns(ConstTensorView src, TensorView dst, int64_t offset, bool accumulate) override;
  void take_columns(ConstTensorView src, int64_t offset, TensorView dst) override;
  void reduce_middle(Reduce op, ConstTensorView x, TensorView y) override;
  void reduce_middle_backward(Reduce op, ConstTensorView x, ConstTensorView y, ConstTensorView dy,
                              TensorView dx) override;
  void row_dot(ConstTensorView x1, ConstTensorView x2, TensorView y) override;
  void scale_rows(ConstTensorView x, ConstTensorView s, TensorView y, bool accumulate) override;
  void column_sums(ConstTensorView x, TensorView y, bool accumulate) override;
  void moments(ConstTensorView x, TensorView mean, TensorView var) override;
  void batch_norm_forward(ConstTensorView x, ConstTensorView mean, ConstTensorView var,
                          ConstTensorView gamma, ConstTensorView beta, float epsilon,
                          TensorView y) override;
  void batch_norm_backward(ConstTensorView x, ConstTensorView mean, ConstTensorView var,
                           ConstTensorView gamma, float epsilon, bool batch_stats,
                           ConstTensorView dy, TensorView dx, TensorView dgamma,
                           TensorView dbeta) override;
  void layer_norm_forward(ConstTensorView x, ConstTensorView gamma, ConstTensorView beta,
                          float epsilon, TensorView y, TensorView mean, TensorView rstd) override;
  void layer_norm_backward(ConstTensorView x, ConstTensorView gamma, ConstTensorView mean,
                           ConstTensorView rstd, ConstTensorView dy, TensorView dx,
                           TensorView dgamma, TensorView dbeta) override;
  void dropout_forward(ConstTensorView x, TensorView y, float rate, uint64_t seed) override;
  void dropout_backward(ConstTensorView dy, TensorView dx, float rate, uint64_t seed) override;

  // generic kernels (core/kernels/generic_cpu.cpp)
  void elementwise(ElementOp op, const std::vector<ConstTensorView>& in, TensorView y) override;
  void elementwise_backward(ElementOp op, int which, const std::vector<ConstTensorView>& in,
                            ConstTensorView y, ConstTensorView dy, TensorView dx,
                            bool accumulate) override;
  void reduce(Reduce op, ConstTensorView x, TensorView y) override;
  void reduce_backward(Reduce op, ConstTensorView x, ConstTensorView y, ConstTensorView dy,
                       TensorView dx, bool accumulate) override;
  void copy_strided(const kernels::IndexSpace<2>& at, ConstTensorView src, TensorView dst,
                    bool accumulate) override;
  void matmul(const MatmulGeometry& g, ConstTensorView a, ConstTensorView b, TensorView y,
              Precision p) override;
  void gather(ConstTensorView x, ConstTensorView index, TensorView y) override;
  void gather_backward(ConstTensorView dy, ConstTensorView index, TensorView dx,
                       bool accumulate) override;

  // layer graph: compile()'s losses (core/cpu/loss_kernels.cpp)
  double loss(LossKind k, ConstTensorView pred, ConstTensorView labels, TensorView grad,
              float grad_scale) override;

  // layer graph: sparse (core/cpu/conv_pool.cpp, core/cpu/sparse_kernels.cpp)
  void conv2d_forward(const Conv2dGeometry& g, ConstTensorView x, ConstTensorView w,
                      ConstTensorView b, TensorView y, std::unique_ptr<Workspace>& ws,
                      Precision p) override;
  void conv2d_backward(const Conv2dGeometry& g, ConstTensorView x, ConstTensorView w,
                       ConstTensorView dy, TensorView dw, TensorView db, TensorView dx,
                       std::unique_ptr<Workspace>& ws, Precision p) override;
  void pool2d_forward(PoolKind k, const Pool2dGeometry& g, ConstTensorView x,
                      TensorView y) override;
  void pool2d_backward(PoolKind k, const Pool2dGeometry& g, ConstTensorView x, ConstTensorView y,
                       ConstTensorView dy, TensorView dx) override;
  void fm_forward(ConstTensorView x, TensorView y) override;
  void fm_backward(ConstTensorView x, ConstTensorView dy, TensorView dx) override;
  void gather_index(ConstTensorView rows, ConstTensorView index, TensorView y) override;
  void scatter_add_index(ConstTensorView dy, ConstTensorView index, TensorView grads) override;
};

/// FLOPs of every matrix product the CPU backend has computed in this process (2 m n k
/// each, however computed): what benchmarks divide by the time to quote a step's share of
/// the CPU's peak.
uint64_t cpu_product_flops();

/// A view's values rounded as policy `p`'s matrix products read them, in `scratch` (the
/// view itself under float32: no copy).
ConstTensorView rounded_operand(ConstTensorView v, Precision p, Tensor& scratch);

}  // namespace troupe::core
