// Keras's arithmetic, comparisons and logical operations of two operands, `where` of
// three, and `clip`: element-wise under NumPy's broadcasting, each operand a tensor of the
// call or a constant of the file (`x + 2.0`, `x * np.array([...])`). The comparisons and
// logical operations give 1 or 0 (Keras's booleans) and pass no gradient.

#include "core/ops/op.hpp"

namespace troupe::core::ops {

namespace {

struct ElementwiseState final : OperandState {
  Tensor y;
  std::vector<Tensor> dx;
};

class Elementwise final : public Op {
 public:
  Elementwise(std::string class_name, std::string name, ElementOp op, std::vector<Operand> operands)
      : Op(std::move(class_name), std::move(name)), op_(op), operands_(std::move(operands)) {}

  std::vector<Kernel> kernels() const override { return {Kernel::elementwise}; }
  bool differentiable() const override { return element_op_differentiable(op_); }
  std::unique_ptr<CallState> make_state() const override {
    return std::make_unique<ElementwiseState>();
  }

  Expected<std::vector<TensorSpec>> build(const std::vector<TensorSpec>& in) override {
    std::vector<Dims> dims;
    for (const auto& o : operands_) {
      if (o.is_tensor() && in[static_cast<size_t>(o.input)].kind != ColumnKind::floats)
        return error("takes float tensors, got " + in[static_cast<size_t>(o.input)].to_string() +
                     " (cast integer ids to float32 first)");
      dims.push_back(Op::dims(o, in));
    }
    auto out = broadcast_dims(*this, dims);
    if (!out) return out.error();
    out_ = *out;
    auto spec = unbatched(*this, out_, ColumnKind::floats);
    if (!spec) return spec.error();
    return std::vector<TensorSpec>{*spec};
  }

  Status forward(Call& c) override {
    auto& s = static_cast<ElementwiseState&>(*c.state);
    const Shape shape = with_batch(out_, c.inputs[0].batch());
    backend().elementwise(op_, values(c), place(s.y, shape));
    c.outputs = {Ref{ColumnKind::floats, s.y, nullptr, shape}};
    return {};
  }

  void backward(Call& c) override {
    auto& s = static_cast<ElementwiseState&>(*c.state);
    const auto in = values(c);
    s.dx.resize(c.inputs.size());
    for (size_t k = 0; k < operands_.size(); ++k) {
      const Operand& o = operands_[k];
      if (!o.is_tensor() || !c.want_dinputs[static_cast<size_t>(o.input)]) continue;
      const auto i = static_cast<size_t>(o.input);
      // An input given twice (x * x) gets both parts: the second adds to the first.
      const bool again = !c.dinputs[i].empty();
      if (!again) place(s.dx[i], c.inputs[i].shape);
      backend().elementwise_backward(op_, static_cast<int>(k), in, s.y, c.doutputs[0], s.dx[i],
                                     again);
      c.dinputs[i] = s.dx[i];
    }
  }

 private:
  std::vector<ConstTensorView> values(const Call& c) {
    std::vector<ConstTensorView> out;
    for (size_t k = 0; k < operands_.size(); ++k)
      out.push_back(value(operands_[k], k, c));
    return out;
  }

  ElementOp op_;
  std::vector<Operand> operands_;
  Dims out_;
};

// clip(x, x_min, x_max) = minimum(maximum(x, x_min), x_max), as Keras's backends compute it
// (a tie at a bound passes half the gradient, as JAX's maximum and minimum do).
struct ClipState final : OperandState {
  Tensor low, y, dlow, dx;
};

class Clip final : public Op {
 public:
  Clip(std::string name, float lo, float hi) : Op("Clip", std::move(name)) {
    lo_.constant = Tensor(Shape{}, lo);
    hi_.constant = Tensor(Shape{}, hi);
  }

  std::vector<Kernel> kernels() const override { return {Kernel::elementwise}; }
  std::unique_ptr<CallState> make_state() const override { return std::make_unique<ClipState>(); }

  Expected<std::vector<TensorSpec>> build(const std::vector<TensorSpec>& in) override {
    if (in.size() != 1 || in[0].kind != ColumnKind::floats)
      return error("takes one float tensor, got " + in[0].to_string());
    return in;
  }

  Status forward(Call& c) override {
    auto& s = static_cast<ClipState&>(*c.state);
    const ConstTensorView x = c.inputs[0].tensor;
    backend().elementwise(ElementOp::maximum, {x, value(lo_, 0, c)}, place(s.low, x.shape()));
    backend().elementwise(ElementOp::minimum, {s.low, value(hi_, 1, c)}, place(s.y, x.shape()));
    c.outputs = {Ref{ColumnKind::floats, s.y, nullptr, c.inputs[0].shape}};
    return {};
  }

  void backward(Call& c) override {
    auto& s = static_cast<ClipState&>(*c.state);
    const ConstTensorView x = c.inputs[0].tensor;
    backend().elementwise_backward(ElementOp::minimum, 0, {s.low, value(hi_, 1, c)}, s.y,
                                   c.doutputs[0], place(s.dlow, x.shape()), false);
    backend().elementwise_backward(ElementOp::maximum, 0, {x, value(lo_, 0, c)}, s.low, s.dlow,
                                   place(s.dx, x.shape()), false);
    c.dinputs[0] = s.dx;
  }

 private:
  Operand lo_, hi_;
};

Expected<std::unique_ptr<graph::Operation>> make(OpConfig& c, ElementOp op) {
  static const char* const names[] = {"x1", "x2", "x3"};
  const int n = element_op_operands(op);
  std::vector<Operand> operands;
  for (int k = 0; k < n; ++k) {
    // where(condition, x1, x2): Keras's names of its arguments.
    const std::string key =
        op == ElementOp::select ? (k == 0 ? "condition" : names[k - 1]) : names[k];
    const Arg* a = c.arg(static_cast<size_t>(k), key);
    if (a == nullptr) return c.arg_error(key, "is missing");
    auto o = Operand::from(*a, c, "argument '" + key + "'");
    if (!o) return o.error();
    operands.push_back(std::move(*o));
  }
  if (c.positional() > static_cast<size_t>(n))
    return c.arg_error(std::to_string(n), "and after: more arguments than the operation takes");
  for (const char* k : {"dtype"})
    if (auto st = c.allow_null(k); !st) return st.error();
  if (auto st = c.finish_call(); !st) return st.error();
  return std::unique_ptr<graph::Operation>(
      std::make_unique<Elementwise>(c.class_name(), c.name(), op, std::move(operands)));
}

}  // namespace

Expected<std::unique_ptr<graph::Operation>> make_elementwise(OpConfig& c) {
  static const std::pair<const char*, ElementOp> kinds[] = {
      {"Add", ElementOp::add},
      {"Subtract", ElementOp::subtract},
      {"Multiply", ElementOp::multiply},
      {"Divide", ElementOp::divide},
      {"TrueDivide", ElementOp::divide},
      {"Power", ElementOp::power},
      {"Maximum", ElementOp::maximum},
      {"Minimum", ElementOp::minimum},
      {"Where", ElementOp::select},
      {"Greater", ElementOp::greater},
      {"GreaterEqual", ElementOp::greater_equal},
      {"Less", ElementOp::less},
      {"LessEqual", ElementOp::less_equal},
      {"Equal", ElementOp::equal},
      {"NotEqual", ElementOp::not_equal},
      {"LogicalAnd", ElementOp::logical_and},
      {"LogicalOr", ElementOp::logical_or},
      {"LogicalXor", ElementOp::logical_xor},
  };
  for (const auto& [name, op] : kinds)
    if (c.class_name() == name) return make(c, op);
  return c.error("class_name", "is not an element-wise operation");
}

Expected<std::unique_ptr<graph::Operation>> make_clip(OpConfig& c) {
  const Arg* x = c.arg(0, "x");
  if (x == nullptr || x->kind != Arg::Kind::tensor) return c.arg_error("x", "must be a tensor");
  auto lo = c.number("x_min", 0.0);
  if (!lo) return lo.error();
  auto hi = c.number("x_max", 0.0);
  if (!hi) return hi.error();
  if (auto st = c.finish_call(); !st) return st.error();
  return std::unique_ptr<graph::Operation>(
      std::make_unique<Clip>(c.name(), to_float(*lo), to_float(*hi)));
}

}  // namespace troupe::core::ops
