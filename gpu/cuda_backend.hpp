#pragma once

// The CUDA backend: one GPU's memory and kernels behind core::Backend. Everything runs in
// order on the backend's own non-blocking stream:
//   memory      a stream-ordered pool (cudaMallocAsync from the device's default pool, its
//               release threshold raised so freed blocks stay for the next step: no
//               cudaMalloc per step);
//   host copies through pinned staging buffers (two, alternating: a step's uploads do not
//               wait for each other); from memory of allocate_host() directly (DMA);
//   Dense       cuBLASLt, bias in the epilogue, float32 accumulation; operands converted to
//               bfloat16/float16 under the mixed policies, TF32 tensor-core math under tf32;
//   Conv2D      cuDNN (NHWC, the kernel transposed from Keras' HWIO to cuDNN's OHWI);
//   the rest    the kernels of gpu/kernels (bodies shared with the host tests).
// A failed CUDA, cuBLAS or cuDNN call is kept (the first one, naming the call and file:line)
// and reported by synchronize(); later kernels are skipped until then.

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>

#include "core/backend.hpp"

namespace troupe::gpu {

class CudaBackend final : public core::Backend {
 public:
  /// The backend of CUDA device `index`: its stream, pool and library handles.
  static core::Expected<std::unique_ptr<CudaBackend>> create(int index);
  ~CudaBackend() override;

  core::Device device() const override { return core::Device::cuda(index_); }
  std::string name() const override { return name_; }
  bool fast(core::Precision p) const override;
  bool has(core::Kernel) const override { return true; }
  int compute_capability() const { return cc_; }
  cudaStream_t stream() const { return stream_; }

  core::DeviceMemory allocate(size_t bytes) override;
  void deallocate(void* p) override;
  core::DeviceMemory allocate_host(size_t bytes) override;
  void deallocate_host(void* p) override;
  void copy(void* dst, core::Device dst_device, const void* src, core::Device src_device,
            size_t bytes) override;
  void fill(core::TensorView x, float value) override;
  core::Status synchronize() override;
  void* native_stream() override { return stream_; }
  std::shared_ptr<void> record_event() override;

  void dense_forward(core::ConstTensorView x, core::ConstTensorView w, core::ConstTensorView b,
                     core::TensorView y, core::Precision p) override;
  void dense_backward(core::ConstTensorView x, core::ConstTensorView w, core::ConstTensorView dy,
                      core::TensorView dw, core::TensorView db, core::TensorView dx,
                      core::Precision p) override;
  void relu_forward(core::ConstTensorView x, core::TensorView y) override;
  void relu_backward(core::ConstTensorView y, core::ConstTensorView dy,
                     core::TensorView dx) override;
  void add(core::ConstTensorView x, core::TensorView y) override;
  void scale(core::TensorView x, float factor) override;
  bool all_finite(const std::vector<core::ConstTensorView>& xs) override;
  void convert(core::ConstTensorView src, core::TensorView dst) override;

  double softmax_cross_entropy(core::ConstTensorView logits, core::ConstTensorView labels,
                               core::TensorView probs, core::TensorView grad,
                               float grad_scale) override;
  double sigmoid_cross_entropy(core::ConstTensorView logits, core::ConstTensorView labels,
                               core::TensorView grad, float grad_scale) override;
  int64_t count_correct(core::ConstTensorView logits, core::ConstTensorView labels) override;
  int64_t binary_metrics(core::ConstTensorView logits, core::ConstTensorView labels,
                         std::vector<int64_t>& pos, std::vector<int64_t>& neg) override;

  void apply_dense(const core::OptimizerConfig& c, core::TensorView w, core::ConstTensorView g,
                   const std::vector<core::TensorView>& slots, int64_t t) override;
  void apply_rows(const core::OptimizerConfig& c, core::TensorView w, core::ConstTensorView rows,
                  core::ConstTensorView grad_rows, const std::vector<core::TensorView>& slots,
                  int64_t t) override;

  // layer graph: basic (gpu/cuda_layer_ops.cpp)
  void activation_forward(core::ActFn f, core::ConstTensorView x, core::TensorView y) override;
  void activation_backward(core::ActFn f, core::ConstTensorView x, core::ConstTensorView y,
                           core::ConstTensorView dy, core::TensorView dx) override;
  void axpby(float a, core::ConstTensorView x, float b, core::TensorView y) override;
  void multiply(core::ConstTensorView x1, core::ConstTensorView x2, core::TensorView y,
                bool accumulate) override;
  void copy_columns(core::ConstTensorView src, core::TensorView dst, int64_t offset,
                    bool accumulate) override;
  void take_columns(core::ConstTensorView src, int64_t offset, core::TensorView dst) override;
  void reduce_middle(core::Reduce op, core::ConstTensorView x, core::TensorView y) override;
  void reduce_middle_backward(core::Reduce op, core::ConstTensorView x, core::ConstTensorView y,
                              core::ConstTensorView dy, core::TensorView dx) override;
  void row_dot(core::ConstTensorView x1, core::ConstTensorView x2, core::TensorView y) override;
  void scale_rows(core::ConstTensorView x, core::ConstTensorView s, core::TensorView y,
                  bool accumulate) override;
  void column_sums(core::ConstTensorView x, core::TensorView y, bool accumulate) override;
  void moments(core::ConstTensorView x, core::TensorView mean, core::TensorView var) override;
  void batch_norm_forward(core::ConstTensorView x, core::ConstTensorView mean,
                          core::ConstTensorView var, core::ConstTensorView gamma,
                          core::ConstTensorView beta, float epsilon, core::TensorView y) override;
  void batch_norm_backward(core::ConstTensorView x, core::ConstTensorView mean,
                           core::ConstTensorView var, core::ConstTensorView gamma, float epsilon,
                           bool batch_stats, core::ConstTensorView dy, core::TensorView dx,
                           core::TensorView dgamma, core::TensorView dbeta) override;
  void layer_norm_forward(core::ConstTensorView x, core::ConstTensorView gamma,
                          core::ConstTensorView beta, float epsilon, core::TensorView y,
                          core::TensorView mean, core::TensorView rstd) override;
  void layer_norm_backward(core::ConstTensorView x, core::ConstTensorView gamma,
                           core::ConstTensorView mean, core::ConstTensorView rstd,
                           core::ConstTensorView dy, core::TensorView dx, core::TensorView dgamma,
                           core::TensorView dbeta) override;
  void dropout_forward(core::ConstTensorView x, core::TensorView y, float rate,
                       uint64_t seed) override;
  void dropout_backward(core::ConstTensorView dy, core::TensorView dx, float rate,
                        uint64_t seed) override;

  // generic kernels (gpu/cuda_generic.cpp: core/kernels/generic.cu's bodies; matmul on gemm())
  void elementwise(core::ElementOp op, const std::vector<core::ConstTensorView>& in,
                   core::TensorView y) override;
  void elementwise_backward(core::ElementOp op, int which,
                            const std::vector<core::ConstTensorView>& in, core::ConstTensorView y,
                            core::ConstTensorView dy, core::TensorView dx,
                            bool accumulate) override;
  void reduce(core::Reduce op, core::ConstTensorView x, core::TensorView y) override;
  void reduce_backward(core::Reduce op, core::ConstTensorView x, core::ConstTensorView y,
                       core::ConstTensorView dy, core::TensorView dx, bool accumulate) override;
  void copy_strided(const core::kernels::IndexSpace<2>& at, core::ConstTensorView src,
                    core::TensorView dst, bool accumulate) override;
  void matmul(const core::MatmulGeometry& g, core::ConstTensorView a, core::ConstTensorView b,
              core::TensorView y, core::Precision p) override;
  void gather(core::ConstTensorView x, core::ConstTensorView index, core::TensorView y) override;
  void gather_backward(core::ConstTensorView dy, core::ConstTensorView index, core::TensorView dx,
                       bool accumulate) override;

  // layer graph: compile()'s losses (gpu/cuda_loss.cpp)
  double loss(core::LossKind k, core::ConstTensorView pred, core::ConstTensorView labels,
              core::TensorView grad, float grad_scale) override;

  // layer graph: sparse (gpu/cuda_conv.cpp, gpu/cuda_sparse.cpp)
  void conv2d_forward(const core::Conv2dGeometry& g, core::ConstTensorView x,
                      core::ConstTensorView w, core::ConstTensorView b, core::TensorView y,
                      std::unique_ptr<core::Workspace>& ws, core::Precision p) override;
  void conv2d_backward(const core::Conv2dGeometry& g, core::ConstTensorView x,
                       core::ConstTensorView w, core::ConstTensorView dy, core::TensorView dw,
                       core::TensorView db, core::TensorView dx,
                       std::unique_ptr<core::Workspace>& ws, core::Precision p) override;
  void pool2d_forward(core::PoolKind k, const core::Pool2dGeometry& g, core::ConstTensorView x,
                      core::TensorView y) override;
  void pool2d_backward(core::PoolKind k, const core::Pool2dGeometry& g, core::ConstTensorView x,
                       core::ConstTensorView y, core::ConstTensorView dy,
                       core::TensorView dx) override;
  void fm_forward(core::ConstTensorView x, core::TensorView y) override;
  void fm_backward(core::ConstTensorView x, core::ConstTensorView dy, core::TensorView dx) override;
  void gather_index(core::ConstTensorView rows, core::ConstTensorView index,
                    core::TensorView y) override;
  void scatter_add_index(core::ConstTensorView dy, core::ConstTensorView index,
                         core::TensorView grads) override;

  /// Records a failed call (the first one is kept); true when `e` is a failure.
  bool failed(cudaError_t e, const char* call, const char* file, int line);
  bool failed(cublasStatus_t s, const char* call, const char* file, int line);
  bool failed(cudnnStatus_t s, const char* call, const char* file, int line);
  /// Whether an earlier call failed (work is skipped until synchronize() reports it).
  bool broken() const { return error_.has_value(); }

 private:
  struct Scratch {
    core::DeviceMemory memory;
    size_t bytes = 0;
  };
  struct Staging;    // pinned host buffers of the copies (gpu/cuda_memory.cpp)
  struct GemmCache;  // cuBLASLt descriptors and algorithms by shape (gpu/cuda_dense.cpp)

  explicit CudaBackend(int index);
  /// Device scratch of at least `bytes` (kept, grown when needed); slot picks one of a few.
  void* scratch(int slot, size_t bytes);
  /// Y (m x n, column-major, ld m) = op(A) op(B) [+ bias] in float32 accumulation, the
  /// operands in policy p's type (converted into scratch here).
  void gemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, const float* a,
            int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc, const float* bias,
            core::Precision p);
  /// A policy's operand: `x` itself (float32, tf32) or its 16-bit copy in scratch `slot`.
  const void* operand(const float* x, int64_t n, core::Precision p, int slot);
  void set_device() const;

  int index_;
  int cc_ = 0;
  std::string name_;
  cudaStream_t stream_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
  cudnnHandle_t dnn_ = nullptr;
  std::unique_ptr<Staging> staging_;
  std::unique_ptr<GemmCache> gemms_;
  std::map<int, Scratch> scratch_;
  core::DeviceMemory counters_;      // a few device words the host reads back (losses, counts)
  mutable std::recursive_mutex mu_;  // steps and the collective engine may share a backend
  std::optional<core::Error> error_;
};

/// Shorthand for the checks inside CudaBackend's methods: returns from the method (with
/// `ret...`) when the call failed.
#define TROUPE_GPU_TRY(call, ...)                                      \
  do {                                                                 \
    if (failed((call), #call, __FILE__, __LINE__)) return __VA_ARGS__; \
  } while (0)

/// The body of a CudaBackend method that launches one kernel: under the backend's lock, on
/// its device, nothing when the backend is broken.
#define TROUPE_GPU_KERNEL(...)                     \
  std::lock_guard<std::recursive_mutex> lock(mu_); \
  if (broken()) return;                            \
  set_device();                                    \
  TROUPE_GPU_TRY(__VA_ARGS__)

}  // namespace troupe::gpu
