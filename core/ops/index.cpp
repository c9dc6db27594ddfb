// Keras's indexing: `x[...]` (GetItem: ints, slices with steps, None, Ellipsis), slice, and
// take with indices baked into the file. A basic index is a strided view of the input,
// copied (its gradient the copy back into zeros); take is a gather along an axis (its
// gradient a scatter that sums repeated indices).

#include <array>
#include <limits>

#include "core/kernels/plan.hpp"
#include "core/ops/op.hpp"

namespace troupe::core::ops {

namespace {

struct IndexState final : CallState {
  Tensor y, dx, index;
};

// A strided view of the input: the result's dims and, per result axis, the input's stride
// (in elements of an example... of the whole tensor, the batch's axis first), from `base`.
class Strided final : public Op {
 public:
  struct Axis {
    enum class Kind { full, index, slice, new_axis, ellipsis } kind = Kind::full;
    int64_t start = 0, stop = 0, step = 1;
    bool has_start = false, has_stop = false;
  };
  Strided(std::string class_name, std::string name, std::vector<Axis> key)
      : Op(std::move(class_name), std::move(name)), key_(std::move(key)) {}

  std::vector<Kernel> kernels() const override { return {Kernel::copy_strided}; }
  std::unique_ptr<CallState> make_state() const override { return std::make_unique<IndexState>(); }

  Expected<std::vector<TensorSpec>> build(const std::vector<TensorSpec>& in) override {
    if (in.size() != 1 || in[0].kind != ColumnKind::floats)
      return error("indexes one float tensor");
    const Dims x = batched(in[0]);
    // The input's strides per example (the batch axis' is set per step).
    std::vector<int64_t> xs(x.size(), 1);
    for (size_t a = x.size() - 1; a > 0; --a)
      xs[a - 1] = xs[a] * (a < x.size() ? x[a] : 1);
    size_t consumed = 0;
    for (const auto& k : key_)
      if (k.kind == Axis::Kind::index || k.kind == Axis::Kind::slice || k.kind == Axis::Kind::full)
        ++consumed;
    if (consumed > x.size()) return error("indexes more axes than " + dims_text(x) + " has");
    out_.clear();
    strides_.clear();
    base_ = 0;
    size_t a = 0;  // the input's next axis
    auto take = [&](const Axis& k) -> Status {
      const int64_t n = x[a];
      if (a == 0) {  // the batch axis: only whole
        const bool whole =
            k.kind == Axis::Kind::full ||
            (k.kind == Axis::Kind::slice && k.step == 1 && (!k.has_start || k.start == 0) &&
             (!k.has_stop || k.stop >= std::numeric_limits<int32_t>::max()));
        if (!whole)
          return error(
              "indexes the batch axis: Troupe keeps the examples of a batch "
              "apart (index from axis 1: x[:, ...])");
        out_.push_back(kBatch);
        strides_.push_back(0);  // set per step: the batch's stride is an example's size
        ++a;
        return {};
      }
      if (k.kind == Axis::Kind::full) {
        out_.push_back(n);
        strides_.push_back(xs[a]);
      } else if (k.kind == Axis::Kind::index) {
        const int64_t i = k.start < 0 ? k.start + n : k.start;
        if (i < 0 || i >= n)
          return error("index " + std::to_string(k.start) + " is outside axis " +
                       std::to_string(a) + " of size " + std::to_string(n));
        base_ += i * xs[a];
      } else {  // a slice, as Python's slice.indices(n)
        // A step longer than the axis takes one element at most: clamped, so no sum below
        // can overflow (a file may hold any int64).
        const int64_t step = std::max<int64_t>(-(n + 1), std::min<int64_t>(n + 1, k.step));
        const int64_t lower = step > 0 ? 0 : -1, upper = step > 0 ? n : n - 1;
        auto clamp = [&](int64_t v) { return v < 0 ? std::max(v + n, lower) : std::min(v, upper); };
        const int64_t start = k.has_start ? clamp(k.start) : (step > 0 ? lower : upper);
        const int64_t stop = k.has_stop ? clamp(k.stop) : (step > 0 ? upper : lower);
        const int64_t count = step > 0 ? std::max<int64_t>(0, (stop - start + step - 1) / step)
                                       : std::max<int64_t>(0, (start - stop - step - 1) / -step);
        out_.push_back(count);
        strides_.push_back(count > 1 ? step * xs[a] : 0);
        base_ += (count > 0 ? start : 0) * xs[a];
      }
      ++a;
      return {};
    };
    for (const auto& k : key_) {
      if (k.kind == Axis::Kind::ellipsis) {  // the axes the other items leave, whole
        const size_t left = x.size() - consumed;
        for (size_t e = 0; e < left; ++e)
          if (auto st = take(Axis{}); !st) return st.error();
        continue;
      }
      if (k.kind == Axis::Kind::new_axis) {
        if (a == 0) return error("adds an axis before the batch axis");
        out_.push_back(1);
        strides_.push_back(0);
        continue;
      }
      if (auto st = take(k); !st) return st.error();
    }
    while (a < x.size())
      if (auto st = take(Axis{}); !st) return st.error();
    auto spec = unbatched(*this, out_, ColumnKind::floats);
    if (!spec) return spec.error();
    example_ = in[0].per_example();
    return std::vector<TensorSpec>{*spec};
  }

  Status forward(Call& c) override {
    auto& s = static_cast<IndexState&>(*c.state);
    const Shape ys = with_batch(out_, c.inputs[0].batch());
    place(s.y, ys);
    backend().copy_strided(plan(ys, true), c.inputs[0].tensor, s.y, false);
    c.outputs = {Ref{ColumnKind::floats, s.y, nullptr, ys}};
    return {};
  }

  void backward(Call& c) override {
    auto& s = static_cast<IndexState&>(*c.state);
    place(s.dx, c.inputs[0].shape);
    backend().fill(s.dx, 0.0f);
    backend().copy_strided(plan(s.y.shape(), false), c.doutputs[0], s.dx, false);
    c.dinputs[0] = s.dx;
  }

 private:
  // From the input to the result (forward) or back.
  kernels::IndexSpace<2> plan(const Shape& ys, bool forward) const {
    std::vector<int64_t> src = strides_;
    src[0] = example_;  // the batch axis
    const auto dst = kernels::strides_of(ys);
    return forward ? kernels::plan_copy(ys.to_vector(), base_, src, 0, dst)
                   : kernels::plan_copy(ys.to_vector(), 0, dst, base_, src);
  }

  std::vector<Axis> key_;
  Dims out_;
  std::vector<int64_t> strides_;
  int64_t base_ = 0, example_ = 1;
};

// take(x, indices, axis): x [outer, n, inner] gathered at the constant indices.
class Take final : public Op {
 public:
  Take(std::string name, int64_t axis, Tensor indices)
      : Op("Take", std::move(name)), axis_(axis), indices_(std::move(indices)) {}

  std::vector<Kernel> kernels() const override { return {Kernel::gather}; }
  std::unique_ptr<CallState> make_state() const override { return std::make_unique<IndexState>(); }

  Expected<std::vector<TensorSpec>> build(const std::vector<TensorSpec>& in) override {
    if (in.size() != 1 || in[0].kind != ColumnKind::floats)
      return error("takes from one float tensor");
    const Dims x = batched(in[0]);
    auto a = axis(axis_, static_cast<int>(x.size()));
    if (!a) return a.error();
    ax_ = *a;
    const int64_t n = x[static_cast<size_t>(ax_)];
    index_.clear();
    for (int64_t i = 0; i < indices_.size(); ++i) {
      const float v = indices_[i];
      // Range first, on the float: a cast of one past int64's range is undefined.
      if (!(v >= -static_cast<float>(n) && v < static_cast<float>(n)) ||
          v != static_cast<float>(static_cast<int64_t>(v)))
        return error("index " + std::to_string(v) + " is outside axis " + std::to_string(axis_) +
                     " of size " + std::to_string(n));
      const auto k = static_cast<int64_t>(v);
      index_.push_back(static_cast<int32_t>(k < 0 ? k + n : k));
    }
    Dims out(x.begin(), x.begin() + ax_);
    const auto idx = indices_.shape().to_vector();
    out.insert(out.end(), idx.begin(), idx.end());
    out.insert(out.end(), x.begin() + ax_ + 1, x.end());
    auto spec = unbatched(*this, out, ColumnKind::floats);
    if (!spec) return spec.error();
    out_ = out;
    return std::vector<TensorSpec>{*spec};
  }

  Status forward(Call& c) override {
    auto& s = static_cast<IndexState&>(*c.state);
    const Ref& x = c.inputs[0];
    if (s.index.device() != device() || s.index.size() != static_cast<int64_t>(index_.size())) {
      Tensor host(Shape{static_cast<int64_t>(index_.size())}, DType::int32, Device::cpu());
      std::copy(index_.begin(), index_.end(), host.data_as<int32_t>());
      s.index = device().is_cpu() ? host : host.to(device());
    }
    const auto [o, n, i] = sides(x.shape);
    const auto k = static_cast<int64_t>(index_.size());
    const Shape ys = with_batch(out_, x.batch());
    place(s.y, ys);
    backend().gather(x.tensor.reshaped(Shape{o, n, i}), s.index,
                     s.y.view().reshaped(Shape{o, k, i}));
    c.outputs = {Ref{ColumnKind::floats, s.y, nullptr, ys}};
    return {};
  }

  void backward(Call& c) override {
    auto& s = static_cast<IndexState&>(*c.state);
    const auto [o, n, i] = sides(c.inputs[0].shape);
    const auto k = static_cast<int64_t>(index_.size());
    place(s.dx, c.inputs[0].shape);
    backend().gather_backward(c.doutputs[0].reshaped(Shape{o, k, i}), s.index,
                              s.dx.view().reshaped(Shape{o, n, i}), false);
    c.dinputs[0] = s.dx;
  }

 private:
  std::array<int64_t, 3> sides(const Shape& s) const {
    int64_t o = 1, i = 1;
    for (int d = 0; d < ax_; ++d)
      o *= s[d];
    for (int d = ax_ + 1; d < s.rank(); ++d)
      i *= s[d];
    return {o, s[ax_], i};
  }

  int64_t axis_;
  Tensor indices_;  // as the file gives them (float32 values of ints)
  int ax_ = 1;
  std::vector<int32_t> index_;
  Dims out_;
};

// One item of an index (GetItem's key), or an error naming it.
Expected<Strided::Axis> key_item(const Arg& a, const OpConfig& c) {
  using K = Strided::Axis::Kind;
  Strided::Axis k;
  if (a.kind == Arg::Kind::none) {
    k.kind = K::new_axis;
    return k;
  }
  if (a.kind == Arg::Kind::constant && a.value.is_number_integer()) {
    k.kind = K::index;
    k.start = a.value.get<int64_t>();
    return k;
  }
  if (a.kind == Arg::Kind::slice) {
    k.kind = K::slice;
    auto field = [&](const char* name, int64_t& v, bool& has) -> Status {
      const auto& f = graph::member(a.value, name);
      if (f.is_null()) return {};
      if (!f.is_number_integer())
        return c.arg_error("key", std::string("has a slice ") + name + " that is no int");
      v = f.get<int64_t>();
      has = true;
      return {};
    };
    bool has_step = false;
    if (auto st = field("start", k.start, k.has_start); !st) return st.error();
    if (auto st = field("stop", k.stop, k.has_stop); !st) return st.error();
    if (auto st = field("step", k.step, has_step); !st) return st.error();
    if (k.step == 0) return c.arg_error("key", "has a slice step of 0");
    return k;
  }
  return c.arg_error("key",
                     "holds " + std::string(a.kind == Arg::Kind::tensor
                                                ? "a tensor (indexing by tensors is not supported: "
                                                  "use take with constant indices)"
                                                : "an index Troupe does not read"));
}

}  // namespace

Expected<std::unique_ptr<graph::Operation>> make_get_item(OpConfig& c) {
  const Arg* x = c.arg(0, "x");
  if (x == nullptr || x->kind != Arg::Kind::tensor) return c.arg_error("x", "must be a tensor");
  const Arg* key = c.arg(1, "key");
  if (key == nullptr) return c.arg_error("key", "is missing");
  std::vector<Arg> items = key->kind == Arg::Kind::list ? key->items : std::vector<Arg>{*key};
  std::vector<Strided::Axis> axes;
  bool ellipsis = false;
  for (const auto& item : items) {
    if (item.kind == Arg::Kind::ellipsis) {
      if (ellipsis) return c.arg_error("key", "has two Ellipses");
      ellipsis = true;
      Strided::Axis k;
      k.kind = Strided::Axis::Kind::ellipsis;
      axes.push_back(k);
      continue;
    }
    auto k = key_item(item, c);
    if (!k) return k.error();
    axes.push_back(*k);
  }
  if (auto st = c.finish_call(); !st) return st.error();
  return std::unique_ptr<graph::Operation>(
      std::make_unique<Strided>(c.class_name(), c.name(), std::move(axes)));
}

Expected<std::unique_ptr<graph::Operation>> make_slice(OpConfig& c) {
  const Arg* x = c.arg(0, "inputs");
  if (x == nullptr || x->kind != Arg::Kind::tensor)
    return c.arg_error("inputs", "must be a tensor");
  const Arg* start = c.arg(1, "start_indices");
  if (start == nullptr || start->kind != Arg::Kind::list)
    return c.arg_error("start_indices", "must be a list of ints");
  const auto& shape = c.raw("shape");
  if (!shape.is_array() || shape.size() != start->items.size())
    return c.error("shape", "must be a list as long as start_indices");
  std::vector<Strided::Axis> axes;
  for (size_t d = 0; d < start->items.size(); ++d) {
    const Arg& s = start->items[d];
    if (s.kind != Arg::Kind::constant || !s.value.is_number_integer())
      return c.arg_error("start_indices", "must be constant ints");
    Strided::Axis k;
    k.kind = Strided::Axis::Kind::slice;
    k.start = s.value.get<int64_t>();
    k.has_start = true;
    if (d == 0) {
      if (k.start != 0 || !(shape[0].is_null() || shape[0] == -1))
        return c.error("shape",
                       "slices the batch axis: Troupe keeps the examples of a batch apart");
      k.kind = Strided::Axis::Kind::full;
    } else {
      if (!shape[d].is_number_integer() || shape[d].get<int64_t>() < 0)
        return c.error("shape", "must be sizes");
      if (k.start < 0 || shape[d].get<int64_t>() > graph::kMaxTensorElements ||
          k.start > graph::kMaxTensorElements)
        return c.error("shape", "and start_indices must be sizes and indices within a tensor");
      k.stop = k.start + shape[d].get<int64_t>();
      k.has_stop = true;
    }
    axes.push_back(k);
  }
  if (auto st = c.finish_call(); !st) return st.error();
  return std::unique_ptr<graph::Operation>(
      std::make_unique<Strided>(c.class_name(), c.name(), std::move(axes)));
}

Expected<std::unique_ptr<graph::Operation>> make_take(OpConfig& c) {
  const Arg* x = c.arg(0, "x");
  if (x == nullptr || x->kind != Arg::Kind::tensor) return c.arg_error("x", "must be a tensor");
  const Arg* indices = c.arg(1, "indices");
  if (indices == nullptr) return c.arg_error("indices", "is missing");
  if (indices->kind == Arg::Kind::tensor)
    return c.arg_error("indices",
                       "is a tensor of the model: take would mix the examples of a "
                       "batch (its result has the batch axis twice); Troupe takes "
                       "constant indices");
  auto t = constant_tensor(*indices, "operation '" + c.name() + "' (Take): indices");
  if (!t) return t.error();
  const auto& a = c.raw("axis");
  if (!a.is_number_integer())
    return c.error("axis", "is None, which flattens the batch: give an axis of an example");
  if (auto st = c.finish_call(); !st) return st.error();
  return std::unique_ptr<graph::Operation>(
      std::make_unique<Take>(c.name(), a.get<int64_t>(), std::move(*t)));
}

}  // namespace troupe::core::ops
