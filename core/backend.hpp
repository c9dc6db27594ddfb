#pragma once

// One device's memory and kernels behind one interface (ggml's ggml-backend, a small
// version of PyTorch's dispatch): layers, losses, metrics and optimizers keep one
// definition and call the backend of the device their tensors live on. The CPU backend
// (core/cpu_backend.*) holds the Eigen kernels; gpu/ registers a CUDA one through a
// DeviceProvider, so core/ compiles and links without CUDA.
//
//   auto device = core::select_device(core::parse_device("cuda").value(), local_rank);
//   core::Backend& be = *core::backend_for(*device).value();
//   be.dense_forward(x, w, b, y, core::Precision::mixed_bfloat16);
//
// Every kernel runs in order on the backend's own stream: a later kernel sees an earlier
// one's results. A call that returns a host value (a loss, a count) waits for the work
// before it; nothing else does until synchronize().

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/device.hpp"
#include "core/device_memory.hpp"
#include "core/expected.hpp"
#include "core/kernels/index_space.hpp"
#include "core/layer_ops.hpp"
#include "core/optimizer_config.hpp"
#include "core/tensor.hpp"

namespace troupe::core {

/// The kernels of the layer graph by family (a kernel's forward and backward together): what
/// an operation says it calls (graph::Operation::kernels) and a backend says it has
/// (Backend::has), asked when a model is placed on a device, before any step (ggml's
/// supports_op).
enum class Kernel : uint8_t {
  // Generic: what Keras's operations are made of.
  activation,
  elementwise,
  reduce,
  copy_strided,
  matmul,
  gather,
  // The layers' own.
  dense,
  conv2d,
  pool2d,
  axpby,
  multiply,
  columns,
  reduce_middle,
  row_dot,
  scale_rows,
  column_sums,
  batch_norm,
  layer_norm,
  dropout,
  fm,
  gather_index,
  loss,
};
inline constexpr int kKernelCount = static_cast<int>(Kernel::loss) + 1;
/// "matmul", "batch_norm".
const char* kernel_name(Kernel k);

/// Per-layer state a backend keeps between a forward and its backward (the CPU's im2col
/// patches, cuDNN's descriptors and workspace). Made by the backend on first use.
class Workspace {
 public:
  virtual ~Workspace() = default;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;
  /// "cpu (AVX-512F, AVX512_BF16, 2 intra-op threads)", "NVIDIA H100 80GB HBM3 (sm_90,
  /// driver 13.0, 79 GiB)".
  virtual std::string name() const = 0;
  /// Whether matrix products in `p` have hardware behind them here (bf16 tensor cores, say);
  /// the CPU backend computes every policy, the low-precision ones as a rounding reference.
  virtual bool fast(Precision p) const = 0;
  /// Whether policy `p` may be asked of this backend at all: an error naming what is
  /// missing (an instruction set, say) when not. Every policy by default.
  virtual Status supports(Precision p) const {
    (void)p;
    return {};
  }
  /// Whether this backend has kernel family `k` (the base: none; each backend lists its own).
  virtual bool has(Kernel k) const {
    (void)k;
    return false;
  }

  // Memory. Device memory comes from a stream-ordered pool: no allocation per step.
  virtual DeviceMemory allocate(size_t bytes) = 0;
  virtual void deallocate(void* p) = 0;
  /// Host memory this device copies from and to fastest (pinned on CUDA, so copies are
  /// DMA without staging). A copy from it is asynchronous: keep it unchanged until the
  /// next synchronize() or copy to the host.
  virtual DeviceMemory allocate_host(size_t bytes);
  virtual void deallocate_host(void* p);
  /// Copies `bytes` between `src` and `dst`, each on the CPU or this device, in order with
  /// the kernels; a copy to the host has arrived when it returns, and a copy from ordinary
  /// host memory has taken its bytes (staged through pinned memory) when it returns.
  virtual void copy(void* dst, Device dst_device, const void* src, Device src_device,
                    size_t bytes) = 0;
  virtual void fill(TensorView x, float value) = 0;
  /// Waits for everything queued; a device's asynchronous error (a failed kernel) is
  /// reported here, naming it.
  virtual Status synchronize() = 0;
  /// The native stream kernels run on (a cudaStream_t), for libraries that order their own
  /// work against it (NCCL); null on the CPU.
  virtual void* native_stream() { return nullptr; }
  /// A point in this backend's stream (everything queued so far) that another stream can
  /// wait for; null on the CPU, where everything queued has happened.
  virtual std::shared_ptr<void> record_event() { return nullptr; }

  // Dense: y = x w + b; x [n, in], w [in, out] (Keras' layout), b [out].
  virtual void dense_forward(ConstTensorView x, ConstTensorView w, ConstTensorView b, TensorView y,
                             Precision p) = 0;
  /// dw = x^T dy, db = the column sums of dy, dx = dy w^T (not when dx is empty).
  virtual void dense_backward(ConstTensorView x, ConstTensorView w, ConstTensorView dy,
                              TensorView dw, TensorView db, TensorView dx, Precision p) = 0;

  /// Dense with a ReLU activation: y = max(x w + b, 0). A backend may fuse the two (the
  /// CPU's oneDNN applies the ReLU as the product's post-op); here, one after the other.
  virtual void dense_relu_forward(ConstTensorView x, ConstTensorView w, ConstTensorView b,
                                  TensorView y, Precision p) {
    dense_forward(x, w, b, y, p);
    relu_forward(y, y);
  }
  /// Its backward pass: dz = dy where y > 0, else 0, then dense_backward with dz. `dz` is
  /// scratch of y's shape on the device (a backend that fuses the masking into its
  /// products' operands may leave it untouched).
  virtual void dense_relu_backward(ConstTensorView x, ConstTensorView w, ConstTensorView y,
                                   ConstTensorView dy, TensorView dz, TensorView dw, TensorView db,
                                   TensorView dx, Precision p) {
    relu_backward(y, dy, dz);
    dense_backward(x, w, dz, dw, db, dx, p);
  }

  /// y = max(x, 0); x and y may be the same tensor.
  virtual void relu_forward(ConstTensorView x, TensorView y) = 0;
  /// dx = dy where y > 0, else 0.
  virtual void relu_backward(ConstTensorView y, ConstTensorView dy, TensorView dx) = 0;

  /// y += x (same shape).
  virtual void add(ConstTensorView x, TensorView y) = 0;
  /// y = a + b (same shapes; y is neither): one pass where the backend has one, else a copy
  /// of a and an add.
  virtual void add_into(ConstTensorView a, ConstTensorView b, TensorView y);
  /// x *= factor.
  virtual void scale(TensorView x, float factor) = 0;
  /// Whether every element of every view is finite (waits for the result).
  virtual bool all_finite(const std::vector<ConstTensorView>& xs) = 0;
  /// Element-type conversion between views of equal size on this device.
  virtual void convert(ConstTensorView src, TensorView dst) = 0;

  /// Softmax cross-entropy of logits [n, c] against int32 labels [n] (checked in range by
  /// the caller): class probabilities into `probs`, d(mean loss)/d(logits) times
  /// `grad_scale` (a loss scale) into `grad`. Returns the mean loss.
  virtual double softmax_cross_entropy(ConstTensorView logits, ConstTensorView labels,
                                       TensorView probs, TensorView grad, float grad_scale) = 0;
  /// Sigmoid binary cross-entropy of logits [n] against float32 labels [n] in [0, 1].
  virtual double sigmoid_cross_entropy(ConstTensorView logits, ConstTensorView labels,
                                       TensorView grad, float grad_scale) = 0;
  /// Examples whose largest logit (the first of equal ones) is the int32 label.
  virtual int64_t count_correct(ConstTensorView logits, ConstTensorView labels) = 0;
  /// From logits [n] and float32 labels: adds sigmoid(logit) into histograms of positives
  /// and negatives over pos.size() equal buckets of [0, 1] (core::AUC's), and returns how
  /// many examples have (p > 0.5) == (label > 0.5).
  virtual int64_t binary_metrics(ConstTensorView logits, ConstTensorView labels,
                                 std::vector<int64_t>& pos, std::vector<int64_t>& neg) = 0;

  /// w -= f(g), elementwise with `slots` (optimizer state of w's size); t counts updates.
  virtual void apply_dense(const OptimizerConfig& c, TensorView w, ConstTensorView g,
                           const std::vector<TensorView>& slots, int64_t t) = 0;
  /// The same for rows `rows` (int64, unique) of w with grad_rows [rows, width].
  virtual void apply_rows(const OptimizerConfig& c, TensorView w, ConstTensorView rows,
                          ConstTensorView grad_rows, const std::vector<TensorView>& slots,
                          int64_t t) = 0;

  // ---- Kernels of the layer graph (core/graph, core/layers; parameters in
  // core/layer_ops.hpp). Generic ones: a layer is a composition of them. float32 views on
  // this device, row-major; int32 index views on this device too. Each backend overrides
  // every one (the base's version is an invariant break naming the kernel and backend).

  /// y = f(x) element-wise (softmax: over the last axis); x and y may be the same tensor.
  virtual void activation_forward(ActFn f, ConstTensorView x, TensorView y);
  /// dx = d(f)/dx * dy, from x or y = f(x) (act_fn_uses_output says which is read; the
  /// other may be empty); dx may be x or dy (each element is read before it is written).
  virtual void activation_backward(ActFn f, ConstTensorView x, ConstTensorView y,
                                   ConstTensorView dy, TensorView dx);
  /// y = a x + b y, element-wise over views of equal size (b = 0: y is not read).
  virtual void axpby(float a, ConstTensorView x, float b, TensorView y);
  /// y = x1 * x2 element-wise (accumulate: y += x1 * x2); equal sizes.
  virtual void multiply(ConstTensorView x1, ConstTensorView x2, TensorView y, bool accumulate);
  /// Columns [offset, offset + c) of dst [r, C] = src [r, c] (accumulate: +=): a
  /// concatenation's forward, and the gradient of a split.
  virtual void copy_columns(ConstTensorView src, TensorView dst, int64_t offset, bool accumulate);
  /// dst [r, c] = columns [offset, offset + c) of src [r, C]: a concatenation's backward.
  virtual void take_columns(ConstTensorView src, int64_t offset, TensorView dst);
  /// y [a, c] = op over the middle axis of x [a, m, c].
  virtual void reduce_middle(Reduce op, ConstTensorView x, TensorView y);
  /// dx [a, m, c] from dy [a, c] (max: all of it to the first maximal element of each
  /// column, found by comparing x with y).
  virtual void reduce_middle_backward(Reduce op, ConstTensorView x, ConstTensorView y,
                                      ConstTensorView dy, TensorView dx);
  /// y [r] = sum over j of x1[r, j] x2[r, j].
  virtual void row_dot(ConstTensorView x1, ConstTensorView x2, TensorView y);
  /// y [r, c] = x [r, c] * s [r] (accumulate: y +=).
  virtual void scale_rows(ConstTensorView x, ConstTensorView s, TensorView y, bool accumulate);
  /// y [c] = the sums of the columns of x [r, c] (accumulate: y +=).
  virtual void column_sums(ConstTensorView x, TensorView y, bool accumulate);

  /// Batch statistics of x [r, c] per column (channels last): mean and biased variance.
  virtual void moments(ConstTensorView x, TensorView mean, TensorView var);
  /// y = gamma (x - mean) / sqrt(var + epsilon) + beta per column; gamma or beta may be
  /// empty (Keras's scale=False, center=False).
  virtual void batch_norm_forward(ConstTensorView x, ConstTensorView mean, ConstTensorView var,
                                  ConstTensorView gamma, ConstTensorView beta, float epsilon,
                                  TensorView y);
  /// Its backward: with batch_stats, mean and var were x's own (training: their gradient
  /// flows into dx); without, they were constants (the moving statistics). dgamma, dbeta
  /// (empty when not wanted) are overwritten.
  virtual void batch_norm_backward(ConstTensorView x, ConstTensorView mean, ConstTensorView var,
                                   ConstTensorView gamma, float epsilon, bool batch_stats,
                                   ConstTensorView dy, TensorView dx, TensorView dgamma,
                                   TensorView dbeta);
  /// Per row of x [r, c]: y = gamma (x - mean_r) * rstd_r + beta, keeping mean [r] and
  /// rstd [r] = 1 / sqrt(var_r + epsilon) for the backward pass; gamma, beta may be empty.
  virtual void layer_norm_forward(ConstTensorView x, ConstTensorView gamma, ConstTensorView beta,
                                  float epsilon, TensorView y, TensorView mean, TensorView rstd);
  virtual void layer_norm_backward(ConstTensorView x, ConstTensorView gamma, ConstTensorView mean,
                                   ConstTensorView rstd, ConstTensorView dy, TensorView dx,
                                   TensorView dgamma, TensorView dbeta);

  /// Convolution with strides, dilation and padding, NHWC: x [n, h, w, c], w [kh, kw, c, f]
  /// (Keras' layout), b [f] (may be empty: use_bias=False), y [n, oh, ow, f].
  virtual void conv2d_forward(const Conv2dGeometry& g, ConstTensorView x, ConstTensorView w,
                              ConstTensorView b, TensorView y, std::unique_ptr<Workspace>& ws,
                              Precision p);
  /// dw, db (empty: none), dx (empty: not wanted) from dy; its own arguments, never a
  /// forward's cached copies.
  virtual void conv2d_backward(const Conv2dGeometry& g, ConstTensorView x, ConstTensorView w,
                               ConstTensorView dy, TensorView dw, TensorView db, TensorView dx,
                               std::unique_ptr<Workspace>& ws, Precision p);
  /// Pooling, NHWC: x [n, h, w, c] -> y [n, oh, ow, c].
  virtual void pool2d_forward(PoolKind k, const Pool2dGeometry& g, ConstTensorView x, TensorView y);
  virtual void pool2d_backward(PoolKind k, const Pool2dGeometry& g, ConstTensorView x,
                               ConstTensorView y, ConstTensorView dy, TensorView dx);

  /// Inverted dropout: y = x / (1 - rate) where element i is kept, 0 elsewhere; element i
  /// is kept when kernels::dropout_keep(seed, i, rate) says so (the same on every backend).
  virtual void dropout_forward(ConstTensorView x, TensorView y, float rate, uint64_t seed);
  /// dx = dy masked and scaled as the forward with the same seed did.
  virtual void dropout_backward(ConstTensorView dy, TensorView dx, float rate, uint64_t seed);

  /// Factorization machine over x [b, F, k]: y [b, 1] = 1/2 sum_k ((sum_f x)^2 - sum_f x^2).
  virtual void fm_forward(ConstTensorView x, TensorView y);
  virtual void fm_backward(ConstTensorView x, ConstTensorView dy, TensorView dx);

  /// y [n, d] = rows [u, d] at index [n] (int32, each < u).
  virtual void gather_index(ConstTensorView rows, ConstTensorView index, TensorView y);
  /// grads [u, d] = the sum of dy's rows [n, d] by index (grads overwritten).
  virtual void scatter_add_index(ConstTensorView dy, ConstTensorView index, TensorView grads);

  // ---- Generic kernels (core/kernels/generic.hpp: the same index bodies on every backend,
  // the CPU's in core/kernels/generic_cpu.cpp and the CUDA one's in core/kernels/generic.cu).
  // float32 views, contiguous and row-major, on this device. Keras's operations
  // (core/ops) are compositions of these and of activation_forward / activation_backward.

  /// y = op(in...) element-wise under NumPy's broadcasting: each operand's shape (as many as
  /// the op takes, of y's rank or fewer, aligned right) broadcasts to y's.
  virtual void elementwise(ElementOp op, const std::vector<ConstTensorView>& in, TensorView y);
  /// The gradient of operand `which`: dx (of its shape) = the sum, over the elements of y
  /// that read each of its elements, of d op / d operand times dy (accumulate: dx +=).
  virtual void elementwise_backward(ElementOp op, int which, const std::vector<ConstTensorView>& in,
                                    ConstTensorView y, ConstTensorView dy, TensorView dx,
                                    bool accumulate);
  /// y = op of x over the axes where y (of x's rank) has size 1 and x does not.
  virtual void reduce(Reduce op, ConstTensorView x, TensorView y);
  /// dx (x's shape) from dy (y's): see kernels::reduce_grad_at (argmax, argmin: zeros).
  virtual void reduce_backward(Reduce op, ConstTensorView x, ConstTensorView y, ConstTensorView dy,
                               TensorView dx, bool accumulate);
  /// dst (+)= src through a copy plan (core/kernels/plan.hpp: transposes, slices, tiles):
  /// operand 0 of `at` is src, operand 1 dst, and no element of dst is named twice.
  virtual void copy_strided(const kernels::IndexSpace<2>& at, ConstTensorView src, TensorView dst,
                            bool accumulate);
  /// A batch of matrix products (core::MatmulGeometry), in float32 here (`p` is for
  /// backends whose products are faster in another type).
  virtual void matmul(const MatmulGeometry& g, ConstTensorView a, ConstTensorView b, TensorView y,
                      Precision p);
  /// Along the middle axis of x [outer, n, inner]: y [outer, k, inner] = x at index (int32 [k]
  /// on this device, each in [0, n)).
  virtual void gather(ConstTensorView x, ConstTensorView index, TensorView y);
  /// Its gradient: dx [outer, n, inner] = the sums of dy's elements by where they came from
  /// (accumulate: dx +=).
  virtual void gather_backward(ConstTensorView dy, ConstTensorView index, TensorView dx,
                               bool accumulate);

  /// A loss of predictions [n, ...] against labels (for the sparse kinds int32 class
  /// indices, one per row of the last axis; else float32 of the predictions' shape): the
  /// mean over examples of each example's loss (mean squared error: the mean over its
  /// elements; predictions [n, t, c]: the mean over the n t rows, as Keras's
  /// "sum_over_batch_size") is returned, and d(mean)/d(pred) times grad_scale is written
  /// into grad (of pred's shape). Class indices are checked in range by the caller.
  virtual double loss(LossKind k, ConstTensorView pred, ConstTensorView labels, TensorView grad,
                      float grad_scale);
};

/// The devices of one kind this process can use (gpu/ provides CUDA's).
class DeviceProvider {
 public:
  virtual ~DeviceProvider() = default;
  /// Devices visible to this process (0: none, or no driver).
  virtual int count() = 0;
  /// What this process sees, for errors: "2 CUDA devices: cuda:0 NVIDIA H100 ..., ..."
  /// or why none ("cudaGetDeviceCount: no CUDA-capable device is detected").
  virtual std::string describe() = 0;
  /// The backend of device `index` (< count()), made on first use and kept.
  virtual Expected<Backend*> backend(int index) = 0;
};

/// Makes `provider` serve `kind` for this process (gpu/ does it for CUDA; idempotent).
void register_device_provider(DeviceKind kind, DeviceProvider* provider);
DeviceProvider* device_provider(DeviceKind kind);

Backend& cpu_backend();
/// The backend of `device`: an error naming the device and what this process has, when
/// none can serve it.
Expected<Backend*> backend_for(Device device);

/// The device a process uses for `request`: "cpu"; "cuda:N" if this process sees N+1 GPUs;
/// "cuda" takes GPU local_rank modulo the GPUs seen (every worker of a host its own, as
/// Horovod's local_rank). An unservable request is an error naming the device and what
/// was found, including CUDA_VISIBLE_DEVICES when it is set.
Expected<Device> select_device(const DeviceRequest& request, int local_rank);

/// The policy for "auto" on a backend: mixed_bfloat16 where bf16 products are fast there,
/// float32 otherwise; any other name as parsed, if the backend supports it.
Expected<Precision> resolve_precision(const std::string& text, const Backend& backend);

}  // namespace troupe::core
