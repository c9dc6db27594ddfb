#pragma once

// The generic kernels Keras's operations and layers are made of (core/backend.hpp, "Generic
// kernels"), as bodies of one index: the CPU backend runs each over its index space in
// chunks (core/kernels/generic_cpu.cpp), the CUDA backend in a grid-stride loop
// (core/kernels/generic.cu), the very same functions. Each body writes only its own
// elements (no atomics), so results do not depend on the order and both backends agree.
// The arguments are plain values made on the host by core/kernels/plan.hpp. TROUPE_HD,
// no CUDA header.

#include <math.h>

#include <cstdint>

#include "core/host_device.hpp"
#include "core/kernels/element_ops.hpp"
#include "core/kernels/index_space.hpp"
#include "core/layer_ops.hpp"

namespace troupe::core::kernels {

/// y[i] = op(in[0], in[1], in[2]) at the operands' offsets of element i of y's index space.
struct ElementwiseArgs {
  ElementOp op = ElementOp::add;
  const float* in[3] = {};
  float* y = nullptr;
  IndexSpace<3> at;  // y's shape; each operand's broadcast strides
};

TROUPE_HD inline void elementwise_at(const ElementwiseArgs& a, int64_t i) {
  int64_t o[3];
  a.at.offsets(i, o);
  const float x0 = a.in[0][o[0]];
  const float x1 = a.in[1] != nullptr ? a.in[1][o[1]] : 0.0f;
  const float x2 = a.in[2] != nullptr ? a.in[2][o[2]] : 0.0f;
  a.y[i] = element(a.op, x0, x1, x2);
}

/// A reduction of one output element over its fiber: `outer` walks the outputs (operands:
/// the inputs read, then the output), `inner` the fiber of one output (the same operands'
/// strides along the reduced axes).
template <int N>
struct Fiber {
  IndexSpace<N> outer, inner;
};

/// dx[i] = sum over the elements j of y that read element i of operand `which` of
/// d op/d operand(j) * dy[j]. Operands of the fiber: in[0..2], y (dy has y's layout), and
/// dx (written at element i of the outer space).
struct ElementwiseGradArgs {
  ElementOp op = ElementOp::add;
  int which = 0;
  const float* in[3] = {};
  const float* y = nullptr;
  const float* dy = nullptr;
  float* dx = nullptr;
  bool accumulate = false;
  Fiber<4> f;
};

TROUPE_HD inline void elementwise_grad_at(const ElementwiseGradArgs& a, int64_t i) {
  int64_t base[4];
  a.f.outer.offsets(i, base);
  const int64_t n = a.f.inner.size();
  float sum = 0.0f;
  for (int64_t j = 0; j < n; ++j) {
    int64_t o[4];
    a.f.inner.offsets(j, o);
    const float x0 = a.in[0][base[0] + o[0]];
    const float x1 = a.in[1] != nullptr ? a.in[1][base[1] + o[1]] : 0.0f;
    const float x2 = a.in[2] != nullptr ? a.in[2][base[2] + o[2]] : 0.0f;
    const int64_t at = base[3] + o[3];
    sum += element_grad(a.op, a.which, x0, x1, x2, a.y[at]) * a.dy[at];
  }
  a.dx[i] = a.accumulate ? a.dx[i] + sum : sum;
}

/// y[i] = op over the fiber of output i of x (operands: x, then y, contiguous).
struct ReduceArgs {
  Reduce op = Reduce::sum;
  const float* x = nullptr;
  float* y = nullptr;
  Fiber<1> f;
};

TROUPE_HD inline void reduce_at(const ReduceArgs& a, int64_t i) {
  int64_t base[1], o[1];
  a.f.outer.offsets(i, base);
  const int64_t n = a.f.inner.size();
  if (n == 0) {  // an empty fiber: the reduction's identity (mean: 0 / 0)
    switch (a.op) {
      case Reduce::sum:
      case Reduce::argmax:
      case Reduce::argmin:
        a.y[i] = 0.0f;
        break;
      case Reduce::mean:
        a.y[i] = NAN;
        break;
      case Reduce::prod:
        a.y[i] = 1.0f;
        break;
      case Reduce::max:
        a.y[i] = -INFINITY;
        break;
      case Reduce::min:
        a.y[i] = INFINITY;
        break;
    }
    return;
  }
  a.f.inner.offsets(0, o);
  float acc = a.x[base[0] + o[0]];
  int64_t best = 0;
  for (int64_t j = 1; j < n; ++j) {
    a.f.inner.offsets(j, o);
    const float v = a.x[base[0] + o[0]];
    switch (a.op) {
      case Reduce::sum:
      case Reduce::mean:
        acc += v;
        break;
      case Reduce::max:
        acc = fmaxf(acc, v);
        break;
      case Reduce::min:
        acc = fminf(acc, v);
        break;
      case Reduce::prod:
        acc *= v;
        break;
      case Reduce::argmax:
        if (v > acc) {
          acc = v;
          best = j;
        }
        break;
      case Reduce::argmin:
        if (v < acc) {
          acc = v;
          best = j;
        }
        break;
    }
  }
  if (a.op == Reduce::mean) acc = acc / static_cast<float>(n);
  if (a.op == Reduce::argmax || a.op == Reduce::argmin) acc = static_cast<float>(best);
  a.y[i] = acc;
}

/// The gradient of a reduction, one output element's fiber at a time: dx over the fiber of
/// output i from dy[i] (max and min: shared evenly by the elements equal to y[i], as JAX
/// does; prod: the product of the others, exact where elements are zero). Operands of the
/// fiber: x, dx (contiguous, x's layout), and the outer space walks y and dy.
struct ReduceGradArgs {
  Reduce op = Reduce::sum;
  const float* x = nullptr;
  const float* y = nullptr;
  const float* dy = nullptr;
  float* dx = nullptr;
  bool accumulate = false;
  Fiber<2> f;
};

TROUPE_HD inline void reduce_grad_at(const ReduceGradArgs& a, int64_t i) {
  int64_t base[2], o[2];
  a.f.outer.offsets(i, base);
  const int64_t n = a.f.inner.size();
  const float g = a.dy[i], y = a.y[i];
  // What each element's share depends on: the ties of an extremum, the zeros of a product.
  int64_t count = 0;
  float others = 1.0f;  // prod: the product of the elements that are not zero
  if (a.op == Reduce::max || a.op == Reduce::min || a.op == Reduce::prod)
    for (int64_t j = 0; j < n; ++j) {
      a.f.inner.offsets(j, o);
      const float v = a.x[base[0] + o[0]];
      if (a.op == Reduce::prod) {
        if (v == 0.0f)
          ++count;
        else
          others *= v;
      } else if (v == y) {
        ++count;
      }
    }
  for (int64_t j = 0; j < n; ++j) {
    a.f.inner.offsets(j, o);
    const float v = a.x[base[0] + o[0]];
    float d = 0.0f;
    switch (a.op) {
      case Reduce::sum:
        d = g;
        break;
      case Reduce::mean:
        d = g / static_cast<float>(n);
        break;
      case Reduce::max:
      case Reduce::min:
        d = v == y ? g / static_cast<float>(count) : 0.0f;
        break;
      case Reduce::prod:
        if (count == 0)
          d = g * (others / v);
        else if (count == 1 && v == 0.0f)
          d = g * others;
        break;
      case Reduce::argmax:
      case Reduce::argmin:
        break;
    }
    float* at = a.dx + base[1] + o[1];
    *at = a.accumulate ? *at + d : d;
  }
}

/// dst (+)= src, element by element of the index space (operands: src, dst). A dst element
/// is named by at most one index: accumulating is safe in parallel.
struct CopyArgs {
  const float* src = nullptr;
  float* dst = nullptr;
  bool accumulate = false;
  IndexSpace<2> at;
};

TROUPE_HD inline void copy_at(const CopyArgs& a, int64_t i) {
  int64_t o[2];
  a.at.offsets(i, o);
  a.dst[o[1]] = a.accumulate ? a.dst[o[1]] + a.src[o[0]] : a.src[o[0]];
}

/// Along the middle axis of x [outer, n, inner]: y [outer, k, inner] = x at index [k] (each in
/// [0, n), checked by the caller).
struct GatherArgs {
  const float* x = nullptr;
  const int32_t* index = nullptr;
  float* y = nullptr;
  int64_t n = 0, k = 0, inner = 1;
};

TROUPE_HD inline void gather_at(const GatherArgs& a, int64_t i) {
  const int64_t c = i % a.inner, j = (i / a.inner) % a.k, o = i / (a.inner * a.k);
  a.y[i] = a.x[(o * a.n + a.index[j]) * a.inner + c];
}

/// Its gradient: dx [outer, n, inner] element i = the sum of dy's elements gathered from it
/// (a loop over the index at each element: no atomics, the order fixed).
TROUPE_HD inline void scatter_at(const GatherArgs& a, const float* dy, float* dx, bool accumulate,
                                 int64_t i) {
  const int64_t c = i % a.inner, r = (i / a.inner) % a.n, o = i / (a.inner * a.n);
  float sum = 0.0f;
  for (int64_t j = 0; j < a.k; ++j)
    if (a.index[j] == r) sum += dy[(o * a.k + j) * a.inner + c];
  dx[i] = accumulate ? dx[i] + sum : sum;
}

}  // namespace troupe::core::kernels
