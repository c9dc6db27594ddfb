// Keras's Activation: y = f(x) element-wise (softmax over the last axis), any shape.

#include "core/layers/layers.hpp"

namespace troupe::core::layers {

namespace {

struct ActivationState final : CallState {
  Tensor y, dx;
};

class Activation final : public graph::Operation {
 public:
  std::vector<Kernel> kernels() const override { return {Kernel::activation}; }
  Activation(std::string name, ActFn f) : Operation("Activation", std::move(name)), f_(f) {}

  Expected<std::vector<TensorSpec>> build(const std::vector<TensorSpec>& in) override {
    if (in.size() != 1 || in[0].kind != ColumnKind::floats) return error("takes one float input");
    return in;
  }
  std::unique_ptr<CallState> make_state() const override {
    return std::make_unique<ActivationState>();
  }

  Status forward(Call& c) override {
    auto& s = static_cast<ActivationState&>(*c.state);
    const Ref& x = c.inputs[0];
    place(s.y, x.shape);
    backend().activation_forward(f_, as_rows(x.tensor), as_rows(TensorView(s.y)));
    c.outputs = {Ref{ColumnKind::floats, s.y, nullptr, x.shape}};
    return {};
  }

  void backward(Call& c) override {
    auto& s = static_cast<ActivationState&>(*c.state);
    if (!c.want_dinputs[0]) return;
    const Ref& x = c.inputs[0];
    place(s.dx, x.shape);
    backend().activation_backward(f_, as_rows(x.tensor), as_rows(ConstTensorView(s.y)),
                                  as_rows(c.doutputs[0]), as_rows(TensorView(s.dx)));
    c.dinputs[0] = s.dx;
  }

 private:
  ActFn f_;
};

}  // namespace

Expected<std::unique_ptr<graph::Operation>> make_activation(LayerConfig& c) {
  auto f = c.activation("activation");
  if (!f) return f.error();
  return std::unique_ptr<graph::Operation>(std::make_unique<Activation>(c.name(), *f));
}

}  // namespace troupe::core::layers
