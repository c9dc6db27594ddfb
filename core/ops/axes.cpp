// Keras's swapaxes and moveaxis: permutations of the axes, computed as transpose's strided
// copy (the batch axis must stay first).

#include <algorithm>

#include "core/ops/op.hpp"

namespace troupe::core::ops {

namespace {

struct AxesState final : CallState {
  Tensor y, dx;
};

class Axes final : public Op {
 public:
  // swapaxes(a, b): `from` = {a}, `to` = {b}, swapped; moveaxis: `from` moved to `to`.
  Axes(std::string class_name, std::string name, std::vector<int64_t> from,
       std::vector<int64_t> to)
      : Op(std::move(class_name), std::move(name)), from_(std::move(from)), to_(std::move(to)) {}

  std::vector<Kernel> kernels() const override { return {Kernel::copy_strided}; }
  std::unique_ptr<CallState> make_state() const override { return std::make_unique<AxesState>(); }

  Expected<std::vector<TensorSpec>> build(const std::vector<TensorSpec>& in) override {
    if (in.size() != 1 || in[0].kind != ColumnKind::floats) return error("takes one float tensor");
    const Dims x = batched(in[0]);
    const int rank = static_cast<int>(x.size());
    std::vector<int> from, to;
    for (size_t i = 0; i < from_.size(); ++i) {
      auto a = axis(from_[i], rank, "source axis");
      if (!a) return a.error();
      auto b = axis(to_[i], rank, "destination axis");
      if (!b) return b.error();
      from.push_back(*a);
      to.push_back(*b);
    }
    perm_.resize(x.size());
    if (class_name() == "Swapaxes") {
      for (int d = 0; d < rank; ++d)
        perm_[static_cast<size_t>(d)] = d;
      std::swap(perm_[static_cast<size_t>(from[0])], perm_[static_cast<size_t>(to[0])]);
    } else {  // NumPy's moveaxis: the moved axes at their places, the others in order
      std::vector<int> rest;
      for (int d = 0; d < rank; ++d)
        if (std::find(from.begin(), from.end(), d) == from.end()) rest.push_back(d);
      std::vector<int> perm(static_cast<size_t>(rank), -1);
      for (size_t i = 0; i < from.size(); ++i) {
        if (perm[static_cast<size_t>(to[i])] >= 0) return error("moves two axes to one place");
        perm[static_cast<size_t>(to[i])] = from[i];
      }
      size_t r = 0;
      for (auto& p : perm)
        if (p < 0) p = rest[r++];
      perm_ = perm;
    }
    Dims out;
    for (int p : perm_)
      out.push_back(x[static_cast<size_t>(p)]);
    auto spec = unbatched(*this, out, ColumnKind::floats);
    if (!spec) return spec.error();
    return std::vector<TensorSpec>{*spec};
  }

  Status forward(Call& c) override {
    auto& s = static_cast<AxesState&>(*c.state);
    transpose(c.inputs[0].tensor, perm_, s.y);
    c.outputs = {Ref{ColumnKind::floats, s.y, nullptr, s.y.shape()}};
    return {};
  }

  void backward(Call& c) override {
    auto& s = static_cast<AxesState&>(*c.state);
    transpose(c.doutputs[0], inverse(perm_), s.dx);
    c.dinputs[0] = s.dx;
  }

 private:
  std::vector<int64_t> from_, to_;
  std::vector<int> perm_;
};

// An int or a list of ints of the config.
Expected<std::vector<int64_t>> axes_of(OpConfig& c, const std::string& key) {
  const auto& v = c.raw(key);
  if (v.is_number_integer()) return std::vector<int64_t>{v.get<int64_t>()};
  std::vector<int64_t> out;
  if (v.is_array())
    for (const auto& e : v)
      if (e.is_number_integer()) out.push_back(e.get<int64_t>());
  if (out.empty() || (v.is_array() && out.size() != v.size()))
    return c.error(key, "must be an int or a list of ints");
  return out;
}

}  // namespace

Expected<std::unique_ptr<graph::Operation>> make_axes(OpConfig& c) {
  const Arg* x = c.arg(0, "x");
  if (x == nullptr || x->kind != Arg::Kind::tensor) return c.arg_error("x", "must be a tensor");
  const bool swap = c.class_name() == "Swapaxes";
  auto from = axes_of(c, swap ? "axis1" : "source");
  if (!from) return from.error();
  auto to = axes_of(c, swap ? "axis2" : "destination");
  if (!to) return to.error();
  if (from->size() != to->size() || (swap && from->size() != 1))
    return c.error(swap ? "axis2" : "destination", "must match the source's count");
  if (auto st = c.finish_call(); !st) return st.error();
  return std::unique_ptr<graph::Operation>(
      std::make_unique<Axes>(c.class_name(), c.name(), std::move(*from), std::move(*to)));
}

}  // namespace troupe::core::ops
