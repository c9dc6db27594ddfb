// Keras's operations that change a tensor's shape: expand_dims, squeeze and reshape (the
// same elements seen another way: no copy, and on integer ids and strings too, on the host),
// transpose (a strided copy), and broadcast_to, tile and repeat (strided copies whose
// gradient is a sum over the copies).

#include <algorithm>
#include <array>

#include "core/kernels/plan.hpp"
#include "core/ops/op.hpp"

namespace troupe::core::ops {

namespace {

// expand_dims, squeeze, reshape: the input's elements as `out_` (a view, no kernel).
class View final : public Op {
 public:
  enum class Kind { expand_dims, squeeze, reshape };
  View(std::string class_name, std::string name, Kind kind, std::vector<int64_t> args)
      : Op(std::move(class_name), std::move(name)), kind_(kind), args_(std::move(args)) {}

  std::vector<Kernel> kernels() const override { return {}; }
  bool on_host() const override { return host_; }

  Expected<std::vector<TensorSpec>> build(const std::vector<TensorSpec>& in) override {
    if (in.size() != 1) return error("takes one tensor");
    host_ = in[0].kind != ColumnKind::floats;
    const Dims x = batched(in[0]);
    const int rank = static_cast<int>(x.size());
    Dims out;
    switch (kind_) {
      case Kind::expand_dims: {
        out = x;
        std::vector<int64_t> axes = args_;
        for (auto& a : axes)  // each in [-(r + k), r + k), r + k the result's rank
          a = a < 0 ? a + rank + static_cast<int64_t>(args_.size()) : a;
        std::sort(axes.begin(), axes.end());
        for (int64_t a : axes) {
          if (a <= 0 || a > static_cast<int64_t>(out.size()))
            return error("axis " + std::to_string(a) + " is " +
                         (a == 0 ? "the batch axis" : "outside the result"));
          out.insert(out.begin() + a, 1);
        }
        break;
      }
      case Kind::squeeze: {
        std::vector<bool> drop(x.size(), false);
        if (args_.empty()) {  // axis=None: every axis of size 1 but the batch's
          for (size_t d = 1; d < x.size(); ++d)
            drop[d] = x[d] == 1;
        }
        for (int64_t a : args_) {
          auto ax = axis(a, rank);
          if (!ax) return ax.error();
          if (x[static_cast<size_t>(*ax)] != 1)
            return error("cannot squeeze axis " + std::to_string(a) + " of size " +
                         std::to_string(x[static_cast<size_t>(*ax)]));
          drop[static_cast<size_t>(*ax)] = true;
        }
        for (size_t d = 0; d < x.size(); ++d)
          if (!drop[d]) out.push_back(x[d]);
        break;
      }
      case Kind::reshape: {
        // The batch axis stays first (-1 or None there), the rest hold an example's elements
        // (one of them may be -1).
        if (args_.empty() || (args_[0] != -1 && args_[0] != kBatch))
          return error("reshapes to " + dims_text(args_) +
                       ": the first axis must stay the batch's (-1 or None)");
        out = {kBatch};
        int64_t known = 1;
        int unknown = -1;
        for (size_t d = 1; d < args_.size(); ++d) {
          if (args_[d] == -1) {
            if (unknown >= 0) return error("reshapes with two unknown sizes");
            unknown = static_cast<int>(d);
          } else if (args_[d] < 0) {
            return error("reshapes to a negative size");
          } else if (args_[d] != 0 && known > graph::kMaxTensorElements / args_[d]) {
            return error("reshapes to " + dims_text(args_) + ", over Troupe's size limit");
          } else {
            known *= args_[d];
          }
          out.push_back(args_[d]);
        }
        const int64_t n = in[0].per_example();
        if (unknown >= 0) {
          if (known == 0 || n % known != 0)
            return error("cannot reshape " + dims_text(x) + " to " + dims_text(args_));
          out[static_cast<size_t>(unknown)] = n / known;
        } else if (known != n) {
          return error("cannot reshape " + dims_text(x) + " to " + dims_text(args_));
        }
        break;
      }
    }
    auto spec = unbatched(*this, out, in[0].kind);
    if (!spec) return spec.error();
    out_ = spec->shape;
    return std::vector<TensorSpec>{*spec};
  }

  Status forward(Call& c) override {
    const Ref& x = c.inputs[0];
    std::vector<int64_t> dims{x.batch()};
    dims.insert(dims.end(), out_.begin(), out_.end());
    Ref y = x;
    y.shape = Shape(dims);
    if (!y.tensor.empty()) y.tensor = x.tensor.reshaped(y.shape);
    c.outputs = {y};
    return {};
  }

  void backward(Call& c) override { c.dinputs[0] = c.doutputs[0].reshaped(c.inputs[0].shape); }

 private:
  Kind kind_;
  std::vector<int64_t> args_;
  std::vector<int64_t> out_;
  bool host_ = false;
};

struct CopyState final : CallState {
  Tensor y, dx;
  std::vector<Tensor> parts;  // tile: the result after each tiled axis but the last
  std::vector<Tensor> grads;  // and the gradients of those, on the way back
};

// transpose: `axes` as the permutation (None: every axis reversed, which moves the batch's).
class Transpose final : public Permutation {
 public:
  Transpose(std::string name, std::vector<int64_t> axes)
      : Permutation("Transpose", std::move(name)), axes_(std::move(axes)) {}

 protected:
  Expected<std::vector<int>> permutation(const Dims& x) const override {
    const int rank = static_cast<int>(x.size());
    if (axes_.empty())
      return error("reverses every axis, the batch's included: give axes that keep axis 0 first");
    if (static_cast<int>(axes_.size()) != rank)
      return error("axes " + dims_text(axes_) + " for a tensor of " + std::to_string(rank) +
                   " axes");
    std::vector<int> perm;
    for (int64_t a : axes_) {
      const int64_t ax = a < 0 ? a + rank : a;
      if (ax < 0 || ax >= rank) return error("axes " + dims_text(axes_) + " are not a permutation");
      perm.push_back(static_cast<int>(ax));
    }
    return perm;
  }

 private:
  std::vector<int64_t> axes_;
};

// broadcast_to, tile, repeat: each output element a copy of one input element. The forward
// is one strided copy per step of the plan; the backward sums each copy's gradient back.
//   broadcast_to: x padded to the result's rank, stride 0 where it stretches;
//   tile:         per tiled axis, [outer, repeats, size, inner] from x's [outer, size, inner];
//   repeat:       [outer, size, repeats, inner].
class Replicate final : public Op {
 public:
  enum class Kind { broadcast_to, tile, repeat };
  Replicate(std::string class_name, std::string name, Kind kind, std::vector<int64_t> args,
            int64_t axis)
      : Op(std::move(class_name), std::move(name)),
        kind_(kind),
        args_(std::move(args)),
        axis_(axis) {}

  std::vector<Kernel> kernels() const override { return {Kernel::copy_strided, Kernel::reduce}; }
  std::unique_ptr<CallState> make_state() const override { return std::make_unique<CopyState>(); }

  Expected<std::vector<TensorSpec>> build(const std::vector<TensorSpec>& in) override {
    if (in.size() != 1 || in[0].kind != ColumnKind::floats) return error("takes one float tensor");
    x_ = batched(in[0]);
    const int rank = static_cast<int>(x_.size());
    Dims out;
    switch (kind_) {
      case Kind::broadcast_to: {
        // The first size is the batch's: None, or the batch size the model was written for
        // (checked in every step: Keras computes such a model at that size only).
        Dims target = args_;
        if (target.empty()) return error("broadcasts to no shape");
        fixed_batch_ = target[0] > 0 ? target[0] : 0;
        target[0] = kBatch;
        auto b = broadcast_dims(*this, {x_, target});
        if (!b) return b.error();
        if (*b != target)
          return error("cannot broadcast " + dims_text(x_) + " to " + dims_text(args_));
        out = target;
        break;
      }
      case Kind::tile: {
        if (static_cast<int>(args_.size()) > rank)
          return error("repeats " + dims_text(args_) + " would add axes before the batch axis");
        reps_.assign(x_.size(), 1);
        for (size_t i = 0; i < args_.size(); ++i)
          reps_[x_.size() - args_.size() + i] = args_[i];
        if (reps_[0] != 1) return error("tiles the batch axis: Troupe keeps the examples apart");
        out = x_;
        for (size_t d = 1; d < out.size(); ++d) {
          if (reps_[d] < 0) return error("repeats must not be negative");
          if (reps_[d] != 0 && out[d] > graph::kMaxTensorElements / reps_[d])
            return error("repeats " + dims_text(args_) + " make a tensor over Troupe's size limit");
          out[d] *= reps_[d];
        }
        break;
      }
      case Kind::repeat: {
        auto a = axis(axis_, rank);
        if (!a) return a.error();
        if (args_.size() != 1 || args_[0] < 0)
          return error("repeats must be one count (per-element counts are not supported)");
        ax_ = *a;
        out = x_;
        if (args_[0] != 0 && out[static_cast<size_t>(ax_)] > graph::kMaxTensorElements / args_[0])
          return error("repeats " + std::to_string(args_[0]) +
                       " make a tensor over Troupe's size limit");
        out[static_cast<size_t>(ax_)] *= args_[0];
        break;
      }
    }
    auto spec = unbatched(*this, out, ColumnKind::floats);
    if (!spec) return spec.error();
    out_ = out;
    return std::vector<TensorSpec>{*spec};
  }

  Status forward(Call& c) override {
    auto& s = static_cast<CopyState&>(*c.state);
    const ConstTensorView x = c.inputs[0].tensor;
    const int64_t batch = c.inputs[0].batch();
    if (fixed_batch_ > 0 && batch != fixed_batch_)
      return error("broadcasts to batches of " + std::to_string(fixed_batch_) +
                   " examples, given " + std::to_string(batch));
    const Shape ys = with_batch(out_, batch);
    place(s.y, ys);
    if (kind_ == Kind::broadcast_to) {
      broadcast(x, ys, s.y);
    } else if (kind_ == Kind::repeat) {
      const auto [o, d, i] = split(x.shape(), ax_);
      const int64_t r = args_[0];
      backend().copy_strided(
          kernels::plan_copy({o, d, r, i}, 0, {d * i, i, 0, 1}, 0, {d * r * i, r * i, i, 1}), x,
          s.y, false);
    } else {
      tile_forward(x, batch, s);
    }
    c.outputs = {Ref{ColumnKind::floats, s.y, nullptr, ys}};
    return {};
  }

  void backward(Call& c) override {
    auto& s = static_cast<CopyState&>(*c.state);
    const Shape xs = c.inputs[0].shape;
    const ConstTensorView dy = c.doutputs[0];
    place(s.dx, xs);
    if (kind_ == Kind::broadcast_to) {
      // The sum over the stretched axes: x's shape padded to dy's rank, kept at that rank.
      std::vector<int64_t> kept(static_cast<size_t>(dy.shape().rank() - xs.rank()), 1);
      for (int d = 0; d < xs.rank(); ++d)
        kept.push_back(xs[d]);
      backend().reduce(Reduce::sum, dy, s.dx.view().reshaped(Shape(kept)));
    } else if (kind_ == Kind::repeat) {
      const auto [o, d, i] = split(xs, ax_);
      const int64_t r = args_[0];
      backend().reduce(Reduce::sum, dy.reshaped(Shape{o, d, r, i}),
                       s.dx.view().reshaped(Shape{o, d, 1, i}));
    } else {
      tile_backward(dy, xs, s);
    }
    c.dinputs[0] = s.dx;
  }

 private:
  // [outer, size, inner] of `s` around axis a.
  static std::array<int64_t, 3> split(const Shape& s, int a) {
    int64_t o = 1, i = 1;
    for (int d = 0; d < a; ++d)
      o *= s[d];
    for (int d = a + 1; d < s.rank(); ++d)
      i *= s[d];
    return {o, s[a], i};
  }
  // One copy per tiled axis, from x to the result through the parts.
  void tile_forward(ConstTensorView x, int64_t batch, CopyState& s) {
    ConstTensorView cur = x;
    Shape shape = x.shape();
    std::vector<int> tiled;
    for (int d = 1; d < shape.rank(); ++d)
      if (reps_[static_cast<size_t>(d)] != 1) tiled.push_back(d);
    s.parts.resize(tiled.size());
    for (size_t k = 0; k < tiled.size(); ++k) {
      const int a = tiled[k];
      const auto [o, d, i] = split(shape, a);
      const int64_t r = reps_[static_cast<size_t>(a)];
      Shape next = shape;
      next[a] = d * r;
      Tensor& dst = k + 1 == tiled.size() ? s.y : s.parts[k];
      place(dst, next);
      backend().copy_strided(
          kernels::plan_copy({o, r, d, i}, 0, {d * i, 0, i, 1}, 0, {r * d * i, d * i, i, 1}), cur,
          dst, false);
      cur = dst;
      shape = next;
    }
    if (tiled.empty()) copy(x, place(s.y, with_batch(out_, batch)));
  }
  // Back through the tiled axes in reverse: each sums its repeats.
  void tile_backward(ConstTensorView dy, const Shape& xs, CopyState& s) {
    std::vector<int> tiled;
    for (int d = 1; d < xs.rank(); ++d)
      if (reps_[static_cast<size_t>(d)] != 1) tiled.push_back(d);
    if (tiled.empty()) {
      copy(dy, s.dx);
      return;
    }
    // The shape after each tiled axis, forward: shapes[k] is the input of step k.
    std::vector<Shape> shapes{xs};
    for (int a : tiled) {
      Shape next = shapes.back();
      next[a] *= reps_[static_cast<size_t>(a)];
      shapes.push_back(next);
    }
    s.grads.resize(tiled.size());
    ConstTensorView cur = dy;
    for (size_t k = tiled.size(); k-- > 0;) {
      const int a = tiled[k];
      const auto [o, d, i] = split(shapes[k], a);
      const int64_t r = reps_[static_cast<size_t>(a)];
      Tensor& dst = k == 0 ? s.dx : s.grads[k];  // the gradient of step k's input
      if (k > 0) place(dst, shapes[k]);
      backend().reduce(Reduce::sum, cur.reshaped(Shape{o, r, d, i}),
                       dst.view().reshaped(Shape{o, 1, d, i}));
      cur = dst;
    }
  }

  Kind kind_;
  std::vector<int64_t> args_;
  int64_t axis_;
  Dims x_, out_;
  std::vector<int64_t> reps_;  // tile: per axis of x
  int64_t fixed_batch_ = 0;    // broadcast_to: the batch size its shape names (0: None)
  int ax_ = 0;                 // repeat: the axis
};

// An int or a list of ints of the config (null: empty), or an error naming it.
Expected<std::vector<int64_t>> ints_or_null(OpConfig& c, const std::string& key) {
  const auto& v = c.raw(key);
  std::vector<int64_t> out;
  if (v.is_null()) return out;
  if (v.is_number_integer()) return std::vector<int64_t>{v.get<int64_t>()};
  if (!v.is_array()) return c.error(key, "must be an int or a list of ints");
  for (const auto& e : v) {
    if (e.is_null()) {
      out.push_back(kBatch);
      continue;
    }
    if (!e.is_number_integer()) return c.error(key, "must be a list of ints");
    out.push_back(e.get<int64_t>());
  }
  return out;
}

Status tensor_x(OpConfig& c) {
  const Arg* x = c.arg(0, "x");
  if (x == nullptr || x->kind != Arg::Kind::tensor) return c.arg_error("x", "must be a tensor");
  return {};
}

}  // namespace

Expected<std::unique_ptr<graph::Operation>> make_view(OpConfig& c) {
  if (auto st = tensor_x(c); !st) return st.error();
  View::Kind kind;
  std::string key;
  if (c.class_name() == "ExpandDims") {
    kind = View::Kind::expand_dims;
    key = "axis";
  } else if (c.class_name() == "Squeeze") {
    kind = View::Kind::squeeze;
    key = "axis";
  } else {
    kind = View::Kind::reshape;
    key = c.has("newshape") ? "newshape" : "new_shape";
  }
  auto args = ints_or_null(c, key);
  if (!args) return args.error();
  if (kind != View::Kind::squeeze && args->empty()) return c.error(key, "is missing");
  if (auto st = c.finish_call(); !st) return st.error();
  return std::unique_ptr<graph::Operation>(
      std::make_unique<View>(c.class_name(), c.name(), kind, std::move(*args)));
}

Expected<std::unique_ptr<graph::Operation>> make_transpose(OpConfig& c) {
  if (auto st = tensor_x(c); !st) return st.error();
  auto axes = ints_or_null(c, "axes");
  if (!axes) return axes.error();
  if (auto st = c.finish_call(); !st) return st.error();
  return std::unique_ptr<graph::Operation>(std::make_unique<Transpose>(c.name(), std::move(*axes)));
}

Expected<std::unique_ptr<graph::Operation>> make_replicate(OpConfig& c) {
  if (auto st = tensor_x(c); !st) return st.error();
  Replicate::Kind kind;
  std::string key;
  int64_t axis = 0;
  if (c.class_name() == "BroadcastTo") {
    kind = Replicate::Kind::broadcast_to;
    key = "shape";
  } else if (c.class_name() == "Tile") {
    kind = Replicate::Kind::tile;
    key = "repeats";
  } else {
    kind = Replicate::Kind::repeat;
    key = "repeats";
    const auto& a = c.raw("axis");
    if (!a.is_number_integer())
      return c.error("axis", "is None, which flattens the batch: give an axis of an example");
    axis = a.get<int64_t>();
  }
  auto args = ints_or_null(c, key);
  if (!args) return args.error();
  if (args->empty()) return c.error(key, "is missing");
  if (auto st = c.finish_call(); !st) return st.error();
  return std::unique_ptr<graph::Operation>(
      std::make_unique<Replicate>(c.class_name(), c.name(), kind, std::move(*args), axis));
}

}  // namespace troupe::core::ops
