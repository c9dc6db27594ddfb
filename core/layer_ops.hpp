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
};

/// Keras's name of the function ("silu" for silu; "gelu" for both gelu forms).
const char* act_fn_name(ActFn f);
/// Keras's activation names ("relu", "swish" = "silu", "linear" = None, ...); anything else
/// is an invalid_argument error naming it.
Expected<ActFn> parse_act_fn(const std::string& name);
/// Whether the backward pass of `f` reads its output y (else its input x).
bool act_fn_uses_output(ActFn f);

/// Reductions over the middle axis of [a, m, c] (pooling over time, multi-hot combiners).
enum class Reduce : uint8_t { sum, mean, max };

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
