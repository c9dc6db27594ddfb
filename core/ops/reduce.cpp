// Keras's reductions over axes (keras.ops sum, mean, max, min, prod, argmax, argmin) with
// `axis` (one, several) and `keepdims`: Backend::reduce over the tensor kept at its rank
// (size 1 on the reduced axes), the result's axes then dropped where keepdims is false.
// argmax and argmin give the index as a float32 and pass no gradient. A reduction over
// the batch axis (axis=None included) is refused: it would mix the examples.

#include <algorithm>

#include "core/ops/op.hpp"

namespace troupe::core::ops {

namespace {

struct ReduceState final : CallState {
  Tensor y, dx;
};

class Reduction final : public Op {
 public:
  Reduction(std::string class_name, std::string name, Reduce op, std::vector<int64_t> axes,
            bool keepdims)
      : Op(std::move(class_name), std::move(name)),
        op_(op),
        axes_(std::move(axes)),
        keepdims_(keepdims) {}

  std::vector<Kernel> kernels() const override { return {Kernel::reduce}; }
  bool differentiable() const override { return op_ != Reduce::argmax && op_ != Reduce::argmin; }
  std::unique_ptr<CallState> make_state() const override { return std::make_unique<ReduceState>(); }

  Expected<std::vector<TensorSpec>> build(const std::vector<TensorSpec>& in) override {
    if (in.size() != 1 || in[0].kind != ColumnKind::floats)
      return error("takes one float tensor, got " +
                   (in.empty() ? std::string("none") : in[0].to_string()));
    const Dims x = batched(in[0]);
    const int rank = static_cast<int>(x.size());
    kept_ = x;
    std::vector<bool> reduced(x.size(), false);
    for (int64_t a : axes_) {
      auto ax = axis(a, rank);
      if (!ax) return ax.error();
      if (reduced[static_cast<size_t>(*ax)])
        return error("reduces axis " + std::to_string(a) + " twice");
      reduced[static_cast<size_t>(*ax)] = true;
      kept_[static_cast<size_t>(*ax)] = 1;
    }
    Dims out;
    for (size_t d = 0; d < x.size(); ++d)
      if (keepdims_ || !reduced[d]) out.push_back(kept_[d]);
    reduced_ = reduced;
    auto spec = unbatched(*this, out, ColumnKind::floats);
    if (!spec) return spec.error();
    return std::vector<TensorSpec>{*spec};
  }

  Status forward(Call& c) override {
    auto& s = static_cast<ReduceState&>(*c.state);
    const ConstTensorView x = c.inputs[0].tensor;
    const Shape kept = with_batch(kept_, c.inputs[0].batch());
    backend().reduce(op_, x, place(s.y, kept));
    Shape out = spec_shape(c.inputs[0].batch());
    c.outputs = {Ref{ColumnKind::floats, s.y.view().reshaped(out), nullptr, out}};
    return {};
  }

  void backward(Call& c) override {
    auto& s = static_cast<ReduceState&>(*c.state);
    const ConstTensorView x = c.inputs[0].tensor;
    backend().reduce_backward(op_, x, s.y, c.doutputs[0].reshaped(s.y.shape()),
                              place(s.dx, x.shape()), false);
    c.dinputs[0] = s.dx;
  }

 private:
  // The output's shape in a step: kept_ without the reduced axes unless keepdims.
  Shape spec_shape(int64_t batch) const {
    std::vector<int64_t> out{batch};
    for (size_t d = 1; d < kept_.size(); ++d)
      if (keepdims_ || !reduced_[d]) out.push_back(kept_[d]);
    return Shape(out);
  }

  Reduce op_;
  std::vector<int64_t> axes_;
  bool keepdims_;
  Dims kept_;                  // the input's dims with 1 on the reduced axes
  std::vector<bool> reduced_;  // per axis
};

}  // namespace

Expected<std::unique_ptr<graph::Operation>> make_reduction(OpConfig& c) {
  static const std::pair<const char*, Reduce> kinds[] = {
      {"Sum", Reduce::sum},   {"Mean", Reduce::mean},     {"Max", Reduce::max},
      {"Amax", Reduce::max},  {"Min", Reduce::min},       {"Amin", Reduce::min},
      {"Prod", Reduce::prod}, {"Argmax", Reduce::argmax}, {"Argmin", Reduce::argmin},
  };
  const Reduce* found = nullptr;
  for (const auto& [name, r] : kinds)
    if (c.class_name() == name) found = &r;
  if (found == nullptr) return c.error("class_name", "is not a reduction");
  const Arg* x = c.arg(0, "x");
  if (x == nullptr || x->kind != Arg::Kind::tensor) return c.arg_error("x", "must be a tensor");
  const auto& a = c.raw("axis");
  std::vector<int64_t> axes;
  if (a.is_number_integer()) {
    axes.push_back(a.get<int64_t>());
  } else if (a.is_array()) {
    for (const auto& v : a) {
      if (!v.is_number_integer()) return c.error("axis", "must be an int or a list of ints");
      axes.push_back(v.get<int64_t>());
    }
  } else {
    return c.error("axis",
                   "is over every axis, the batch's included: Troupe keeps the examples "
                   "of a batch apart (give the axes of an example)");
  }
  if ((*found == Reduce::argmax || *found == Reduce::argmin) && axes.size() != 1)
    return c.error("axis", "must be one axis");
  auto keepdims = c.boolean("keepdims", false);
  if (!keepdims) return keepdims.error();
  for (const char* k : {"initial", "dtype", "where"})
    if (auto st = c.allow_null(k); !st) return st.error();
  if (auto st = c.finish_call(); !st) return st.error();
  return std::unique_ptr<graph::Operation>(
      std::make_unique<Reduction>(c.class_name(), c.name(), *found, std::move(axes), *keepdims));
}

}  // namespace troupe::core::ops
