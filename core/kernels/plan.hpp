#pragma once

// The index spaces of the generic kernels (core/kernels/generic.hpp), made on the host from
// shapes: NumPy's broadcasting, reductions over axes, and the strided copies that
// transposes, slices, concatenations, tiles and repeats are. Adjacent axes that every
// operand walks contiguously are merged, so an element-wise product of equal shapes is one
// flat loop.
//
//   auto args = kernels::plan_elementwise(ElementOp::add, {a.shape(), b.shape()}, y.shape());
//   auto t = kernels::plan_transpose(x.shape(), {0, 2, 1});   // then Backend::copy_strided

#include <cstdint>
#include <vector>

#include "core/kernels/generic.hpp"
#include "core/tensor.hpp"

namespace troupe::core::kernels {

/// The shape that `shapes` broadcast to under NumPy's rules (aligned right; a 1 stretches),
/// or false where two sizes differ and neither is 1.
bool broadcast_shape(const std::vector<Shape>& shapes, Shape& out);

/// y = op(in...) over y's shape; the operand pointers are set by the caller.
ElementwiseArgs plan_elementwise(ElementOp op, const std::vector<Shape>& in, const Shape& y);
/// The gradient of operand `which` (of shape in[which]) of y = op(in...).
ElementwiseGradArgs plan_elementwise_grad(ElementOp op, int which, const std::vector<Shape>& in,
                                          const Shape& y);
/// A reduction of x to y: y has x's rank, 1 on the reduced axes.
ReduceArgs plan_reduce(Reduce op, const Shape& x, const Shape& y);
ReduceGradArgs plan_reduce_grad(Reduce op, const Shape& x, const Shape& y);

/// The same with the views' data: what every backend's body of the kernel is given (the
/// CPU's loop, the CUDA one's grid).
ElementwiseArgs elementwise_args(ElementOp op, const std::vector<ConstTensorView>& in,
                                 TensorView y);
ElementwiseGradArgs elementwise_grad_args(ElementOp op, int which,
                                          const std::vector<ConstTensorView>& in, ConstTensorView y,
                                          ConstTensorView dy, TensorView dx, bool accumulate);
ReduceArgs reduce_args(Reduce op, ConstTensorView x, TensorView y);
ReduceGradArgs reduce_grad_args(Reduce op, ConstTensorView x, ConstTensorView y, ConstTensorView dy,
                                TensorView dx, bool accumulate);
CopyArgs copy_args(const IndexSpace<2>& at, ConstTensorView src, TensorView dst, bool accumulate);
/// gather's: x [outer, n, inner], index [k], y [outer, k, inner] (scatter: y the gradient's
/// dy, x's shape the gradient dx's).
GatherArgs gather_args(const Shape& x, ConstTensorView index, const Shape& y);

/// Row-major strides of a shape.
std::vector<int64_t> strides_of(const Shape& s);

/// A copy over `dims`: element i of the box is at src_base + sum(i_a src_strides[a]) in the
/// source and dst_base + sum(i_a dst_strides[a]) in the destination.
IndexSpace<2> plan_copy(const std::vector<int64_t>& dims, int64_t src_base,
                        const std::vector<int64_t>& src_strides, int64_t dst_base,
                        const std::vector<int64_t>& dst_strides);
/// y = x with its axes permuted: y's axis a is x's axis perm[a] (y contiguous).
IndexSpace<2> plan_transpose(const Shape& x, const std::vector<int>& perm);
/// Every index space merged where it can be: adjacent axes a, a + 1 become one where each
/// operand's stride of a is its stride of a + 1 times the size of a + 1; axes of size 1 go.
template <int N>
void coalesce(IndexSpace<N>& s);

}  // namespace troupe::core::kernels
