// Keras's Maximum and Minimum of inputs of one shape, element-wise. The k inputs are
// stacked as [batch, k, n] (one column copy each) and reduced over the middle axis, so the
// gradient goes to the first input holding the extremum, as the reduction's backward
// gives it (Keras splits a tie; ties have measure zero). Minimum is the maximum of the
// negated stack, negated: min x = -max(-x), and its gradient is the same selection.

#include "core/layers/layers.hpp"

namespace troupe::core::layers {

namespace {

struct ExtremumState final : CallState {
  Tensor stack, top, y, dstack;
  std::vector<Tensor> dx;
};

class Extremum final : public graph::Operation {
 public:
  std::vector<Kernel> kernels() const override {
    return {Kernel::axpby, Kernel::columns, Kernel::reduce_middle};
  }
  Extremum(std::string name, bool minimum)
      : Operation(minimum ? "Minimum" : "Maximum", std::move(name)), minimum_(minimum) {}

  Expected<std::vector<TensorSpec>> build(const std::vector<TensorSpec>& in) override {
    if (in.empty()) return error("takes a list of at least one input");
    if (auto st = same_float_inputs(*this, in); !st) return st.error();
    return std::vector<TensorSpec>{in[0]};
  }

  std::unique_ptr<CallState> make_state() const override {
    return std::make_unique<ExtremumState>();
  }

  Status forward(Call& c) override {
    auto& s = static_cast<ExtremumState&>(*c.state);
    const Shape& shape = c.inputs[0].shape;
    const int64_t b = c.inputs[0].batch(), n = b == 0 ? 0 : c.inputs[0].tensor.size() / b;
    const auto k = static_cast<int64_t>(c.inputs.size());
    TensorView stack = place(s.stack, Shape{b, k, n});
    const TensorView rows = stack.reshaped(Shape{b, k * n});
    for (int64_t i = 0; i < k; ++i)
      backend().copy_columns(c.inputs[static_cast<size_t>(i)].tensor.reshaped(Shape{b, n}), rows,
                             i * n, false);
    if (minimum_) backend().axpby(-1.0f, stack, 0.0f, stack);
    TensorView top = place(s.top, Shape{b, n});
    backend().reduce_middle(Reduce::max, stack, top);
    if (minimum_) {
      TensorView y = place(s.y, shape);
      backend().axpby(-1.0f, top, 0.0f, y.reshaped(Shape{b, n}));
      c.outputs = {Ref{ColumnKind::floats, y, nullptr, shape}};
    } else {
      c.outputs = {Ref{ColumnKind::floats, top.reshaped(shape), nullptr, shape}};
    }
    return {};
  }

  void backward(Call& c) override {
    auto& s = static_cast<ExtremumState&>(*c.state);
    const Shape& stack_shape = s.stack.shape();
    const int64_t b = stack_shape[0], k = stack_shape[1], n = stack_shape[2];
    TensorView dstack = place(s.dstack, stack_shape);
    backend().reduce_middle_backward(Reduce::max, s.stack, s.top,
                                     c.doutputs[0].reshaped(Shape{b, n}), dstack);
    s.dx.resize(static_cast<size_t>(k));
    for (int64_t i = 0; i < k; ++i) {
      const auto at = static_cast<size_t>(i);
      if (!c.want_dinputs[at]) continue;
      TensorView dx = place(s.dx[at], c.inputs[at].shape);
      backend().take_columns(dstack.reshaped(Shape{b, k * n}), i * n, dx.reshaped(Shape{b, n}));
      c.dinputs[at] = dx;
    }
  }

 private:
  bool minimum_;
};

}  // namespace

Expected<std::unique_ptr<graph::Operation>> make_maximum(LayerConfig& c) {
  return std::unique_ptr<graph::Operation>(std::make_unique<Extremum>(c.name(), false));
}

Expected<std::unique_ptr<graph::Operation>> make_minimum(LayerConfig& c) {
  return std::unique_ptr<graph::Operation>(std::make_unique<Extremum>(c.name(), true));
}

}  // namespace troupe::core::layers
