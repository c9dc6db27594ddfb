// Keras's element-wise functions of one tensor (keras.ops: exp, log, sqrt, abs, tanh, relu,
// erf, ...), and softmax and log_softmax over an axis: the activation kernels
// (Backend::activation_forward / activation_backward) over the tensor, the axis moved last
// by a transpose where it is not.

#include "core/kernels/activation.hpp"
#include "core/ops/op.hpp"

namespace troupe::core::ops {

namespace {

struct MapState final : CallState {
  Tensor y, dx;
  Tensor xt, yt, dyt, dxt;  // an axis other than the last: the tensors with it moved last
};

class Map final : public Op {
 public:
  Map(std::string class_name, std::string name, ActFn f, int64_t axis)
      : Op(std::move(class_name), std::move(name)), f_(f), axis_(axis) {}

  std::vector<Kernel> kernels() const override {
    return {Kernel::activation, Kernel::copy_strided};
  }
  bool differentiable() const override { return f_ != ActFn::sign && f_ != ActFn::logical_not; }
  std::unique_ptr<CallState> make_state() const override { return std::make_unique<MapState>(); }

  Expected<std::vector<TensorSpec>> build(const std::vector<TensorSpec>& in) override {
    if (in.size() != 1 || in[0].kind != ColumnKind::floats)
      return error("takes one float tensor, got " +
                   (in.empty() ? std::string("none") : in[0].to_string()));
    const int rank = static_cast<int>(in[0].shape.size()) + 1;
    if (kernels::act_fn_by_rows(f_)) {
      auto a = axis(axis_, rank);
      if (!a) return a.error();
      perm_.clear();
      if (*a != rank - 1) {  // the axis last: [0, .., a-1, a+1, .., a]
        for (int d = 0; d < rank; ++d)
          if (d != *a) perm_.push_back(d);
        perm_.push_back(*a);
      }
    }
    return in;
  }

  Status forward(Call& c) override {
    auto& s = static_cast<MapState&>(*c.state);
    const ConstTensorView x = c.inputs[0].tensor;
    if (perm_.empty()) {
      backend().activation_forward(f_, x, place(s.y, x.shape()));
    } else {
      transpose(x, perm_, s.xt);
      backend().activation_forward(f_, s.xt, place(s.yt, s.xt.shape()));
      transpose(s.yt, inverse(perm_), s.y);
    }
    c.outputs = {Ref{ColumnKind::floats, s.y, nullptr, c.inputs[0].shape}};
    return {};
  }

  void backward(Call& c) override {
    auto& s = static_cast<MapState&>(*c.state);
    const ConstTensorView x = c.inputs[0].tensor;
    if (perm_.empty()) {
      backend().activation_backward(f_, x, s.y, c.doutputs[0], place(s.dx, x.shape()));
    } else {
      transpose(c.doutputs[0], perm_, s.dyt);
      backend().activation_backward(f_, s.xt, s.yt, s.dyt, place(s.dxt, s.xt.shape()));
      transpose(s.dxt, inverse(perm_), s.dx);
    }
    c.dinputs[0] = s.dx;
  }

 private:
  ActFn f_;
  int64_t axis_;
  std::vector<int> perm_;  // empty: f applies where the tensor is
};

}  // namespace

Expected<std::unique_ptr<graph::Operation>> make_map(OpConfig& c) {
  static const std::pair<const char*, ActFn> kinds[] = {
      {"Negative", ActFn::negative},
      {"Exp", ActFn::exponential},
      {"Log", ActFn::log},
      {"Log1p", ActFn::log1p},
      {"Sqrt", ActFn::sqrt},
      {"Square", ActFn::square},
      {"Absolute", ActFn::abs},
      {"Abs", ActFn::abs},
      {"Sign", ActFn::sign},
      {"Tanh", ActFn::tanh},
      {"Sigmoid", ActFn::sigmoid},
      {"Relu", ActFn::relu},
      {"Erf", ActFn::erf},
      {"LogSigmoid", ActFn::log_sigmoid},
      {"Softplus", ActFn::softplus},
      {"Silu", ActFn::silu},
      {"Swish", ActFn::silu},
      {"Selu", ActFn::selu},
      {"Reciprocal", ActFn::reciprocal},
      {"LogicalNot", ActFn::logical_not},
      {"Softmax", ActFn::softmax},
      {"LogSoftmax", ActFn::log_softmax},
      {"Elu", ActFn::elu},
      {"LeakyRelu", ActFn::leaky_relu},
      {"Gelu", ActFn::gelu},
  };
  const ActFn* found = nullptr;
  for (const auto& [name, f] : kinds)
    if (c.class_name() == name) found = &f;
  if (found == nullptr) return c.error("class_name", "is not an element-wise function");
  ActFn f = *found;
  const Arg* x = c.arg(0, "x");
  if (x == nullptr || x->kind != Arg::Kind::tensor) return c.arg_error("x", "must be a tensor");
  int64_t axis = -1;
  if (kernels::act_fn_by_rows(f)) {
    auto a = c.integer("axis", -1);
    if (!a) return a.error();
    axis = *a;
  }
  // The parameters the kernels fix: Keras's defaults only.
  if (f == ActFn::elu)
    if (auto st = c.allow("alpha", {1.0}); !st) return st.error();
  if (f == ActFn::leaky_relu)
    if (auto st = c.allow("negative_slope", {0.2}); !st) return st.error();
  if (f == ActFn::gelu) {
    auto approximate = c.boolean("approximate", true);  // keras.ops.gelu's default
    if (!approximate) return approximate.error();
    if (*approximate) f = ActFn::gelu_tanh;
  }
  if (auto st = c.finish_call(); !st) return st.error();
  return std::unique_ptr<graph::Operation>(
      std::make_unique<Map>(c.class_name(), c.name(), f, axis));
}

}  // namespace troupe::core::ops
