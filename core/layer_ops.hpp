#pragma once

// The parameters of the layer graph's kernels (core/backend.hpp, "Kernels of the layer
// graph"): small value types that every backend reads the same way. The per-element
// arithmetic that the CPU and CUDA backends share lives in core/kernels/.

#include <cstdint>
#include <string>

#include "core/expected.hpp"

namespace troupe::core {

/// Element-wise activations, by Keras's names (keras.activations); softmax is over the last
/// axis. gelu is Keras's default (exact, with erf); gelu_tanh its approximate=True form;
/// leaky_relu has Keras's default negative slope 0.2.
enum class ActFn : uint8_t {
  linear,
  relu,
  sigmoid,
  tanh,
  softmax,
  gelu,
  gelu_tanh,
  silu,
  softplus,
  elu,
  selu,
  leaky_relu,
  exponential,
  // The element-wise maps of Keras's operations (keras.ops) that are no activation: never
  // parsed from an activation name. log_softmax is over the last axis, as softmax.
  log_softmax,
  negative,
  log,
  log1p,
  sqrt,
  square,
  abs,
  sign,
  erf,
  log_sigmoid,
  logical_not,
  reciprocal,
};

/// How many ActFn values there are (the CPU's dispatch tables follow the enum).
inline constexpr int kActFnCount = static_cast<int>(ActFn::reciprocal) + 1;

/// Keras's name of the function ("silu" for silu; "gelu" for both gelu forms; an
/// operation's for the others: "log1p").
const char* act_fn_name(ActFn f);
/// Keras's activation names ("relu", "swish" = "silu", "linear" = None, ...); anything else
/// is an invalid_argument error naming it.
Expected<ActFn> parse_act_fn(const std::string& name);
/// Whether the backward pass of `f` reads its output y (else its input x).
bool act_fn_uses_output(ActFn f);

/// Reductions: over the middle axis of [a, m, c] (reduce_middle: pooling over time, multi-hot
/// combiners; sum, mean and max only), or over any axes (Backend::reduce: every one; argmax
/// and argmin give the index along the reduced axes, first of equal ones, as a float, and
/// have no gradient).
enum class Reduce : uint8_t { sum, mean, max, min, prod, argmax, argmin };

/// Element-wise functions of two or three operands under NumPy's broadcasting
/// (Backend::elementwise): Keras's arithmetic operations, `where` (select: a where c != 0,
/// else b; operands c, a, b), and the comparisons and logical operations, which give 1 or 0
/// and have no gradient.
enum class ElementOp : uint8_t {
  add,
  subtract,
  multiply,
  divide,
  power,
  maximum,
  minimum,
  select,
  greater,
  greater_equal,
  less,
  less_equal,
  equal,
  not_equal,
  logical_and,
  logical_or,
  logical_xor,
};

/// Its operand count (select: 3, the others 2), whether it has a gradient, and its name as
/// Keras's operation (keras.ops) spells it ("add", "where", "greater_equal").
int element_op_operands(ElementOp op);
bool element_op_differentiable(ElementOp op);
const char* element_op_name(ElementOp op);

enum class PoolKind : uint8_t { max, average };

/// Where a 2-D window reads, NHWC: strides, dilation, and the padding on each side (Keras'
/// "same" pads bottom/right by the odd one out, as TensorFlow does).
struct Conv2dGeometry {
  int64_t stride_h = 1, stride_w = 1;
  int64_t dilation_h = 1, dilation_w = 1;
  int64_t pad_top = 0, pad_bottom = 0, pad_left = 0, pad_right = 0;
};

/// A pooling window: its size, strides and padding. Average pooling divides by the window's
/// elements that fall inside the input (padding excluded, as TensorFlow's "SAME").
struct Pool2dGeometry {
  int64_t pool_h = 2, pool_w = 2;
  int64_t stride_h = 2, stride_w = 2;
  int64_t pad_top = 0, pad_bottom = 0, pad_left = 0, pad_right = 0;
};

/// A batch of matrix products (Backend::matmul): for b in [0, batch), y[b] (m x n) = op(a[b])
/// (m x k) times op(b[b]) (k x n), each matrix row-major and dense, op transposing where
/// asked. Strides are in elements between consecutive batches' matrices; a stride of 0
/// uses one matrix for every batch (a, b: broadcast; y: every batch's product summed into
/// it). With accumulate, y += the products.
struct MatmulGeometry {
  int64_t batch = 1, m = 0, n = 0, k = 0;
  bool transpose_a = false, transpose_b = false;
  int64_t stride_a = 0, stride_b = 0, stride_y = 0;
  bool accumulate = false;
};

/// Keras's "valid" / "same" output size along one axis, and the padding "same" needs there
/// (before, after). effective_window = (window - 1) * dilation + 1.
int64_t window_output_size(int64_t input, int64_t effective_window, int64_t stride, bool same);
void same_padding(int64_t input, int64_t effective_window, int64_t stride, int64_t& before,
                  int64_t& after);

/// The losses of compile(), as Keras computes them per example and averages over the batch
/// (the "sum_over_batch_size" reduction). Probabilities are clipped to [1e-7, 1 - 1e-7] as
/// Keras's backend epsilon does; the *_logits forms are the overflow-free ones.
enum class LossKind : uint8_t {
  binary_crossentropy,
  binary_crossentropy_logits,
  categorical_crossentropy,
  categorical_crossentropy_logits,
  sparse_categorical_crossentropy,
  sparse_categorical_crossentropy_logits,
  mean_squared_error,
};

const char* loss_kind_name(LossKind k);
/// Whether the loss's labels are class indices (int32) rather than floats of the
/// prediction's shape.
inline bool loss_takes_classes(LossKind k) {
  return k == LossKind::sparse_categorical_crossentropy ||
         k == LossKind::sparse_categorical_crossentropy_logits;
}

}  // namespace troupe::core
