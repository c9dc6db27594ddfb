// Keras's operations that join tensors along an axis or take one apart: concatenate and
// stack (each input copied into its slice of the result), split and unstack (each output a
// slice of the input). All strided copies: their gradients are the copies the other way.

#include "core/kernels/plan.hpp"
#include "core/ops/op.hpp"

namespace troupe::core::ops {

namespace {

// [outer, size, inner] of `s` around axis a.
struct Around {
  int64_t outer = 1, size = 1, inner = 1;
};
Around around(const Shape& s, int a) {
  Around r;
  for (int d = 0; d < a; ++d)
    r.outer *= s[d];
  r.size = s[a];
  for (int d = a + 1; d < s.rank(); ++d)
    r.inner *= s[d];
  return r;
}

// Moves `part` [outer, size, inner] to or from columns [offset, offset + size) of `whole`
// [outer, total, inner] along the middle axis.
kernels::IndexSpace<2> slice_plan(int64_t outer, int64_t size, int64_t inner, int64_t total,
                                  int64_t offset, bool into_whole) {
  const std::vector<int64_t> part{size * inner, inner, 1}, whole{total * inner, inner, 1};
  return into_whole ? kernels::plan_copy({outer, size, inner}, 0, part, offset * inner, whole)
                    : kernels::plan_copy({outer, size, inner}, offset * inner, whole, 0, part);
}

struct JoinState final : CallState {
  Tensor y;
  std::vector<Tensor> dx;
};

// concatenate (stack: each input seen with a new axis of size 1 at `axis`).
class Join final : public Op {
 public:
  Join(std::string class_name, std::string name, bool stack, int64_t axis)
      : Op(std::move(class_name), std::move(name)), stack_(stack), axis_(axis) {}

  std::vector<Kernel> kernels() const override { return {Kernel::copy_strided}; }
  std::unique_ptr<CallState> make_state() const override { return std::make_unique<JoinState>(); }

  Expected<std::vector<TensorSpec>> build(const std::vector<TensorSpec>& in) override {
    if (in.empty()) return error("takes a list of tensors");
    Dims first = batched(in[0]);
    if (stack_) {  // the new axis in [-(r + 1), r]
      const int64_t r = static_cast<int64_t>(first.size());
      const int64_t a = axis_ < 0 ? axis_ + r + 1 : axis_;
      if (a <= 0 || a > r)
        return error("axis " + std::to_string(axis_) +
                     (a == 0 ? " is the batch axis" : " is outside the result"));
      ax_ = static_cast<int>(a);
    } else {
      auto a = axis(axis_, static_cast<int>(first.size()));
      if (!a) return a.error();
      ax_ = *a;
    }
    Dims out = first;  // its size along the axis summed below, from 0
    if (stack_)
      out.insert(out.begin() + ax_, 0);
    else
      out[static_cast<size_t>(ax_)] = 0;
    for (const auto& s : in) {
      Dims d = batched(s);
      if (s.kind != ColumnKind::floats) return error("takes float tensors, got " + s.to_string());
      if (stack_) d.insert(d.begin() + ax_, 1);
      for (size_t k = 0; k < d.size(); ++k)
        if (static_cast<int>(k) != ax_ && (d.size() != out.size() || d[k] != out[k]))
          return error("joins tensors of other shapes: " + dims_text(batched(in[0])) + " and " +
                       dims_text(batched(s)));
      out[static_cast<size_t>(ax_)] += d[static_cast<size_t>(ax_)];
    }
    auto spec = unbatched(*this, out, ColumnKind::floats);
    if (!spec) return spec.error();
    out_ = out;
    return std::vector<TensorSpec>{*spec};
  }

  Status forward(Call& c) override {
    auto& s = static_cast<JoinState&>(*c.state);
    const Shape ys = with_batch(out_, c.inputs[0].batch());
    place(s.y, ys);
    const Around w = around(ys, ax_);
    int64_t offset = 0;
    for (const auto& x : c.inputs) {
      const int64_t size = x.tensor.size() / (w.outer * w.inner);
      backend().copy_strided(slice_plan(w.outer, size, w.inner, w.size, offset, true), x.tensor,
                             s.y, false);
      offset += size;
    }
    c.outputs = {Ref{ColumnKind::floats, s.y, nullptr, ys}};
    return {};
  }

  void backward(Call& c) override {
    auto& s = static_cast<JoinState&>(*c.state);
    const Around w = around(s.y.shape(), ax_);
    s.dx.resize(c.inputs.size());
    int64_t offset = 0;
    for (size_t k = 0; k < c.inputs.size(); ++k) {
      const auto& x = c.inputs[k];
      const int64_t size = x.tensor.size() / (w.outer * w.inner);
      if (c.want_dinputs[k]) {
        // An input joined twice (concatenate([x, x])): its second slice adds to its first.
        const bool again = !c.dinputs[k].empty();
        if (!again) place(s.dx[k], x.shape);
        backend().copy_strided(slice_plan(w.outer, size, w.inner, w.size, offset, false),
                               c.doutputs[0], s.dx[k], again);
        c.dinputs[k] = s.dx[k];
      }
      offset += size;
    }
  }

 private:
  bool stack_;
  int64_t axis_;
  int ax_ = 1;
  Dims out_;
};

struct PartState final : CallState {
  std::vector<Tensor> y;
  Tensor dx;
};

// split (sections of `sizes_` along the axis) and unstack (every index, the axis dropped).
class Part final : public Op {
 public:
  // `split`: unstack's num (or none); split's count of sections, or its indices (`indices`).
  Part(std::string class_name, std::string name, bool unstack, int64_t axis,
       std::vector<int64_t> split, bool indices)
      : Op(std::move(class_name), std::move(name)),
        unstack_(unstack),
        axis_(axis),
        split_(std::move(split)),
        indices_(indices) {}

  std::vector<Kernel> kernels() const override { return {Kernel::copy_strided}; }
  std::unique_ptr<CallState> make_state() const override { return std::make_unique<PartState>(); }

  Expected<std::vector<TensorSpec>> build(const std::vector<TensorSpec>& in) override {
    if (in.size() != 1 || in[0].kind != ColumnKind::floats) return error("takes one float tensor");
    const Dims x = batched(in[0]);
    auto a = axis(axis_, static_cast<int>(x.size()));
    if (!a) return a.error();
    ax_ = *a;
    const int64_t n = x[static_cast<size_t>(ax_)];
    sizes_.clear();
    if (unstack_) {
      if (!split_.empty() && split_[0] != n)
        return error("num " + std::to_string(split_[0]) + " is not the axis' size " +
                     std::to_string(n));
      sizes_.assign(static_cast<size_t>(n), 1);
    } else if (split_.size() == 1 && split_[0] > 0 && !indices_) {
      if (n % split_[0] != 0)
        return error("cannot split an axis of " + std::to_string(n) + " into " +
                     std::to_string(split_[0]) + " equal sections");
      sizes_.assign(static_cast<size_t>(split_[0]), n / split_[0]);
    } else {  // split points, clipped to the axis as NumPy does
      int64_t at = 0;
      for (int64_t p : split_) {
        const int64_t q = std::min(std::max<int64_t>(p < 0 ? p + n : p, at), n);
        sizes_.push_back(q - at);
        at = q;
      }
      sizes_.push_back(n - at);
    }
    std::vector<TensorSpec> out;
    for (int64_t size : sizes_) {
      Dims d = x;
      if (unstack_)
        d.erase(d.begin() + ax_);
      else
        d[static_cast<size_t>(ax_)] = size;
      auto spec = unbatched(*this, d, ColumnKind::floats);
      if (!spec) return spec.error();
      out.push_back(*spec);
    }
    return out;
  }

  Status forward(Call& c) override {
    auto& s = static_cast<PartState&>(*c.state);
    const Ref& x = c.inputs[0];
    const Around w = around(x.shape, ax_);
    s.y.resize(sizes_.size());
    c.outputs.clear();
    int64_t offset = 0;
    for (size_t k = 0; k < sizes_.size(); ++k) {
      Shape ys = x.shape;
      ys[ax_] = sizes_[k];
      backend().copy_strided(slice_plan(w.outer, sizes_[k], w.inner, w.size, offset, false),
                             x.tensor, place(s.y[k], ys), false);
      if (unstack_) ys = drop_axis(ys, ax_);
      c.outputs.push_back(Ref{ColumnKind::floats, s.y[k].view().reshaped(ys), nullptr, ys});
      offset += sizes_[k];
    }
    return {};
  }

  void backward(Call& c) override {
    auto& s = static_cast<PartState&>(*c.state);
    const Ref& x = c.inputs[0];
    const Around w = around(x.shape, ax_);
    place(s.dx, x.shape);
    int64_t offset = 0;
    for (size_t k = 0; k < sizes_.size(); ++k) {
      backend().copy_strided(slice_plan(w.outer, sizes_[k], w.inner, w.size, offset, true),
                             c.doutputs[k], s.dx, false);
      offset += sizes_[k];
    }
    c.dinputs[0] = s.dx;
  }

 private:
  static Shape drop_axis(const Shape& s, int a) {
    std::vector<int64_t> d;
    for (int k = 0; k < s.rank(); ++k)
      if (k != a) d.push_back(s[k]);
    return Shape(d);
  }

  bool unstack_;
  int64_t axis_;
  std::vector<int64_t> split_;
  bool indices_;
  int ax_ = 1;
  std::vector<int64_t> sizes_;
};

}  // namespace

Expected<std::unique_ptr<graph::Operation>> make_join(OpConfig& c) {
  const bool stack = c.class_name() == "Stack";
  const Arg* xs = c.arg(0, "xs");
  if (xs == nullptr || xs->kind != Arg::Kind::list || xs->items.empty())
    return c.arg_error("xs", "must be a list of tensors");
  for (const auto& e : xs->items)
    if (e.kind != Arg::Kind::tensor)
      return c.arg_error("xs", "holds a constant: Troupe joins tensors of the model only");
  auto axis = c.integer("axis", 0);  // Keras's default: the batch axis, refused
  if (!axis) return axis.error();
  if (auto st = c.finish_call(); !st) return st.error();
  return std::unique_ptr<graph::Operation>(
      std::make_unique<Join>(c.class_name(), c.name(), stack, *axis));
}

Expected<std::unique_ptr<graph::Operation>> make_part(OpConfig& c) {
  const bool unstack = c.class_name() == "Unstack";
  const Arg* x = c.arg(0, "x");
  if (x == nullptr || x->kind != Arg::Kind::tensor) return c.arg_error("x", "must be a tensor");
  auto axis = c.integer("axis", 0);
  if (!axis) return axis.error();
  std::vector<int64_t> split;
  bool indices = false;
  if (unstack) {
    const auto& num = c.raw("num");
    if (num.is_number_integer()) split.push_back(num.get<int64_t>());
  } else {
    const auto& v = c.raw("indices_or_sections");
    if (v.is_number_integer()) {
      split.push_back(v.get<int64_t>());
    } else if (v.is_array()) {
      indices = true;
      for (const auto& e : v) {
        if (!e.is_number_integer()) return c.error("indices_or_sections", "must be ints");
        split.push_back(e.get<int64_t>());
      }
    } else {
      return c.error("indices_or_sections", "must be a count or a list of indices");
    }
  }
  if (auto st = c.finish_call(); !st) return st.error();
  return std::unique_ptr<graph::Operation>(
      std::make_unique<Part>(c.class_name(), c.name(), unstack, *axis, std::move(split), indices));
}

}  // namespace troupe::core::ops
