#include "core/kernels/plan.hpp"

#include "core/assert.hpp"

namespace troupe::core::kernels {

namespace {

// `s` with ones in front up to `rank` axes (NumPy's alignment on the right).
std::vector<int64_t> padded(const Shape& s, int rank) {
  std::vector<int64_t> out(static_cast<size_t>(rank - s.rank()), 1);
  for (int a = 0; a < s.rank(); ++a)
    out.push_back(s[a]);
  return out;
}

// Strides of `s` padded to `rank` axes, 0 where its size is 1 (a broadcast axis).
std::vector<int64_t> broadcast_strides(const Shape& s, int rank) {
  const auto dims = padded(s, rank);
  std::vector<int64_t> st(dims.size(), 0);
  int64_t step = 1;
  for (size_t a = dims.size(); a-- > 0;) {
    st[a] = dims[a] == 1 ? 0 : step;
    step *= dims[a];
  }
  return st;
}

}  // namespace

template <int N>
void coalesce(IndexSpace<N>& s) {
  IndexSpace<N> out;
  for (int k = 0; k < N; ++k)
    out.base[k] = s.base[k];
  for (int a = 0; a < s.rank; ++a) {
    if (s.dims[a] == 1) continue;
    bool merge = out.rank > 0;
    for (int k = 0; k < N && merge; ++k)
      merge = out.strides[k][out.rank - 1] == s.strides[k][a] * s.dims[a];
    if (merge) {
      out.dims[out.rank - 1] *= s.dims[a];
      for (int k = 0; k < N; ++k)
        out.strides[k][out.rank - 1] = s.strides[k][a];
      continue;
    }
    out.dims[out.rank] = s.dims[a];
    for (int k = 0; k < N; ++k)
      out.strides[k][out.rank] = s.strides[k][a];
    ++out.rank;
  }
  s = out;
}

template void coalesce<1>(IndexSpace<1>&);
template void coalesce<2>(IndexSpace<2>&);
template void coalesce<3>(IndexSpace<3>&);
template void coalesce<4>(IndexSpace<4>&);

bool broadcast_shape(const std::vector<Shape>& shapes, Shape& out) {
  int rank = 0;
  for (const auto& s : shapes)
    rank = std::max(rank, s.rank());
  std::vector<int64_t> dims(static_cast<size_t>(rank), 1);
  for (const auto& s : shapes) {
    const auto p = padded(s, rank);
    for (size_t a = 0; a < dims.size(); ++a) {
      if (p[a] == dims[a] || p[a] == 1) continue;
      if (dims[a] != 1) return false;
      dims[a] = p[a];
    }
  }
  out = Shape(dims);
  return true;
}

std::vector<int64_t> strides_of(const Shape& s) {
  std::vector<int64_t> st(static_cast<size_t>(s.rank()), 1);
  for (int a = s.rank() - 1; a > 0; --a)
    st[static_cast<size_t>(a - 1)] = st[static_cast<size_t>(a)] * s[a];
  return st;
}

ElementwiseArgs plan_elementwise(ElementOp op, const std::vector<Shape>& in, const Shape& y) {
  TROUPE_ASSERT(static_cast<int>(in.size()) == element_op_operands(op) && in.size() <= 3,
                "an element-wise operation given another number of operands");
  ElementwiseArgs a;
  a.op = op;
  a.at.rank = y.rank();
  for (int d = 0; d < y.rank(); ++d)
    a.at.dims[d] = y[d];
  for (size_t k = 0; k < in.size(); ++k) {
    TROUPE_ASSERT(in[k].rank() <= y.rank(), "an operand of higher rank than the result");
    const auto st = broadcast_strides(in[k], y.rank());
    for (int d = 0; d < y.rank(); ++d)
      a.at.strides[k][d] = st[static_cast<size_t>(d)];
  }
  coalesce(a.at);
  return a;
}

ElementwiseGradArgs plan_elementwise_grad(ElementOp op, int which, const std::vector<Shape>& in,
                                          const Shape& y) {
  TROUPE_ASSERT(which >= 0 && static_cast<size_t>(which) < in.size() && in.size() <= 3,
                "an element-wise gradient of an operand that is not there");
  ElementwiseGradArgs g;
  g.op = op;
  g.which = which;
  const int rank = y.rank();
  const auto mine = padded(in[static_cast<size_t>(which)], rank);
  const auto y_strides = strides_of(y);
  std::vector<std::vector<int64_t>> st;
  for (const auto& s : in)
    st.push_back(broadcast_strides(s, rank));
  g.f.outer.rank = g.f.inner.rank = rank;
  for (int d = 0; d < rank; ++d) {
    const bool kept = mine[static_cast<size_t>(d)] == y[d];
    g.f.outer.dims[d] = kept ? y[d] : 1;
    g.f.inner.dims[d] = kept ? 1 : y[d];
    for (size_t k = 0; k < st.size(); ++k)
      g.f.outer.strides[k][d] = g.f.inner.strides[k][d] = st[k][static_cast<size_t>(d)];
    g.f.outer.strides[3][d] = g.f.inner.strides[3][d] = y_strides[static_cast<size_t>(d)];
  }
  coalesce(g.f.outer);
  coalesce(g.f.inner);
  return g;
}

namespace {

// The outer (y's elements) and inner (one fiber) spaces of a reduction of x to y, for N
// operands laid out as x (operand 0 and, for a gradient, 1).
template <int N>
Fiber<N> reduce_fiber(const Shape& x, const Shape& y) {
  TROUPE_ASSERT(x.rank() == y.rank(), "a reduction's result must keep the input's rank");
  Fiber<N> f;
  const auto xs = strides_of(x);
  f.outer.rank = f.inner.rank = x.rank();
  for (int d = 0; d < x.rank(); ++d) {
    TROUPE_ASSERT(y[d] == x[d] || y[d] == 1, "a reduction's result of another size");
    const bool reduced = y[d] == 1 && x[d] != 1;
    f.outer.dims[d] = reduced ? 1 : x[d];
    f.inner.dims[d] = reduced ? x[d] : 1;
    for (int k = 0; k < N; ++k)
      f.outer.strides[k][d] = f.inner.strides[k][d] = xs[static_cast<size_t>(d)];
  }
  coalesce(f.outer);
  coalesce(f.inner);
  return f;
}

}  // namespace

ReduceArgs plan_reduce(Reduce op, const Shape& x, const Shape& y) {
  ReduceArgs a;
  a.op = op;
  a.f = reduce_fiber<1>(x, y);
  return a;
}

ReduceGradArgs plan_reduce_grad(Reduce op, const Shape& x, const Shape& y) {
  ReduceGradArgs a;
  a.op = op;
  a.f = reduce_fiber<2>(x, y);
  return a;
}

IndexSpace<2> plan_copy(const std::vector<int64_t>& dims, int64_t src_base,
                        const std::vector<int64_t>& src_strides, int64_t dst_base,
                        const std::vector<int64_t>& dst_strides) {
  TROUPE_ASSERT(dims.size() <= static_cast<size_t>(kMaxAxes) && dims.size() == src_strides.size() &&
                    dims.size() == dst_strides.size(),
                "a copy plan of inconsistent ranks");
  IndexSpace<2> s;
  s.rank = static_cast<int>(dims.size());
  s.base[0] = src_base;
  s.base[1] = dst_base;
  for (size_t a = 0; a < dims.size(); ++a) {
    s.dims[a] = dims[a];
    s.strides[0][a] = src_strides[a];
    s.strides[1][a] = dst_strides[a];
  }
  coalesce(s);
  return s;
}

IndexSpace<2> plan_transpose(const Shape& x, const std::vector<int>& perm) {
  TROUPE_ASSERT(static_cast<int>(perm.size()) == x.rank(), "a permutation of another rank");
  const auto xs = strides_of(x);
  std::vector<int64_t> dims, src;
  for (int p : perm) {
    dims.push_back(x[p]);
    src.push_back(xs[static_cast<size_t>(p)]);
  }
  return plan_copy(dims, 0, src, 0, strides_of(Shape(dims)));
}

namespace {

std::vector<Shape> shapes(const std::vector<ConstTensorView>& in) {
  std::vector<Shape> out;
  for (const auto& v : in)
    out.push_back(v.shape());
  return out;
}

}  // namespace

ElementwiseArgs elementwise_args(ElementOp op, const std::vector<ConstTensorView>& in,
                                 TensorView y) {
  auto a = plan_elementwise(op, shapes(in), y.shape());
  for (size_t k = 0; k < in.size(); ++k)
    a.in[k] = in[k].data();
  a.y = y.data();
  return a;
}

ElementwiseGradArgs elementwise_grad_args(ElementOp op, int which,
                                          const std::vector<ConstTensorView>& in, ConstTensorView y,
                                          ConstTensorView dy, TensorView dx, bool accumulate) {
  auto a = plan_elementwise_grad(op, which, shapes(in), y.shape());
  for (size_t k = 0; k < in.size(); ++k)
    a.in[k] = in[k].data();
  a.y = y.data();
  a.dy = dy.data();
  a.dx = dx.data();
  a.accumulate = accumulate;
  return a;
}

ReduceArgs reduce_args(Reduce op, ConstTensorView x, TensorView y) {
  auto a = plan_reduce(op, x.shape(), y.shape());
  a.x = x.data();
  a.y = y.data();
  return a;
}

ReduceGradArgs reduce_grad_args(Reduce op, ConstTensorView x, ConstTensorView y, ConstTensorView dy,
                                TensorView dx, bool accumulate) {
  auto a = plan_reduce_grad(op, x.shape(), y.shape());
  a.x = x.data();
  a.y = y.data();
  a.dy = dy.data();
  a.dx = dx.data();
  a.accumulate = accumulate;
  return a;
}

CopyArgs copy_args(const IndexSpace<2>& at, ConstTensorView src, TensorView dst, bool accumulate) {
  CopyArgs a;
  a.src = src.data();
  a.dst = dst.data();
  a.accumulate = accumulate;
  a.at = at;
  return a;
}

GatherArgs gather_args(const Shape& x, ConstTensorView index, const Shape& y) {
  GatherArgs a;
  a.index = index.data_as<int32_t>();
  a.n = x[1];
  a.k = y[1];
  a.inner = x[2];
  return a;
}

}  // namespace troupe::core::kernels
