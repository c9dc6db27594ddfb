#pragma once

// Keras's element-wise operations of two or three operands (core::ElementOp), one element at
// a time, and their partial derivatives as JAX defines them (Keras's reference backend
// here): maximum and minimum split the gradient of a tie evenly (jax's balanced_eq), power's
// d/dx is 0 where the exponent is 0 and its d/dy is 0 where the base is 0. Written once for
// every backend. TROUPE_HD, no CUDA header.
//
//   y  = kernels::element(ElementOp::divide, a, b, 0);
//   da = kernels::element_grad(ElementOp::divide, 0, a, b, 0, y) * dy;

#include <math.h>

#include "core/host_device.hpp"
#include "core/layer_ops.hpp"

namespace troupe::core::kernels {

/// op(a, b) (select: c ? a : b, its operands given as (c, a, b) in (a, b, c)).
TROUPE_HD inline float element(ElementOp op, float a, float b, float c) {
  switch (op) {
    case ElementOp::add:
      return a + b;
    case ElementOp::subtract:
      return a - b;
    case ElementOp::multiply:
      return a * b;
    case ElementOp::divide:
      return a / b;
    case ElementOp::power:
      return powf(a, b);
    case ElementOp::maximum:
      return fmaxf(a, b);
    case ElementOp::minimum:
      return fminf(a, b);
    case ElementOp::select:
      return a != 0.0f ? b : c;
    case ElementOp::greater:
      return a > b ? 1.0f : 0.0f;
    case ElementOp::greater_equal:
      return a >= b ? 1.0f : 0.0f;
    case ElementOp::less:
      return a < b ? 1.0f : 0.0f;
    case ElementOp::less_equal:
      return a <= b ? 1.0f : 0.0f;
    case ElementOp::equal:
      return a == b ? 1.0f : 0.0f;
    case ElementOp::not_equal:
      return a != b ? 1.0f : 0.0f;
    case ElementOp::logical_and:
      return (a != 0.0f && b != 0.0f) ? 1.0f : 0.0f;
    case ElementOp::logical_or:
      return (a != 0.0f || b != 0.0f) ? 1.0f : 0.0f;
    case ElementOp::logical_xor:
      return ((a != 0.0f) != (b != 0.0f)) ? 1.0f : 0.0f;
  }
  return 0.0f;
}

/// d op / d operand `which` at (a, b, c), whose value was y.
TROUPE_HD inline float element_grad(ElementOp op, int which, float a, float b, float c, float y) {
  switch (op) {
    case ElementOp::add:
      return 1.0f;
    case ElementOp::subtract:
      return which == 0 ? 1.0f : -1.0f;
    case ElementOp::multiply:
      return which == 0 ? b : a;
    case ElementOp::divide:
      return which == 0 ? 1.0f / b : -a / (b * b);
    case ElementOp::power:
      if (which == 0) return b == 0.0f ? 0.0f : b * powf(a, b - 1.0f);
      return a == 0.0f ? 0.0f : logf(a) * y;
    case ElementOp::maximum:
    case ElementOp::minimum: {
      const float mine = which == 0 ? a : b, other = which == 0 ? b : a;
      if (mine != y) return 0.0f;
      return other == y ? 0.5f : 1.0f;
    }
    case ElementOp::select:
      if (which == 0) return 0.0f;
      return (a != 0.0f) == (which == 1) ? 1.0f : 0.0f;
    default:  // comparisons and logical operations: piecewise constant
      return 0.0f;
  }
}

}  // namespace troupe::core::kernels
