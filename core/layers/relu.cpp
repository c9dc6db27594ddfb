// Keras's ReLU and LeakyReLU layers. ReLU: max(x, 0) (Keras's defaults; a max_value,
// negative_slope or threshold of its own is refused by name). LeakyReLU: x where x >= 0,
// negative_slope x elsewhere (Keras's layer default 0.3), computed as
// negative_slope x + (1 - negative_slope) relu(x) from the ReLU kernel and axpby.

#include "core/layers/layers.hpp"

namespace troupe::core::layers {

namespace {

struct ReluState final : CallState {
  Tensor r, y, dx;  // r: relu(x)
};

class Relu final : public graph::Operation {
 public:
  // slope 0: ReLU.
  Relu(std::string class_name, std::string name, float slope)
      : Operation(std::move(class_name), std::move(name)), slope_(slope) {}

  Expected<std::vector<TensorSpec>> build(const std::vector<TensorSpec>& in) override {
    if (in.size() != 1 || in[0].kind != ColumnKind::floats) return error("takes one float input");
    return in;
  }
  std::vector<Kernel> kernels() const override { return {Kernel::activation, Kernel::axpby}; }
  std::unique_ptr<CallState> make_state() const override { return std::make_unique<ReluState>(); }

  Status forward(Call& c) override {
    auto& s = static_cast<ReluState&>(*c.state);
    const Ref& x = c.inputs[0];
    backend().activation_forward(ActFn::relu, x.tensor, place(s.r, x.shape));
    if (slope_ == 0.0f) {
      c.outputs = {Ref{ColumnKind::floats, s.r, nullptr, x.shape}};
      return {};
    }
    copy(s.r, place(s.y, x.shape));
    backend().axpby(slope_, x.tensor, 1.0f - slope_, s.y);
    c.outputs = {Ref{ColumnKind::floats, s.y, nullptr, x.shape}};
    return {};
  }

  void backward(Call& c) override {
    auto& s = static_cast<ReluState&>(*c.state);
    const Ref& x = c.inputs[0];
    backend().activation_backward(ActFn::relu, {}, s.r, c.doutputs[0], place(s.dx, x.shape));
    if (slope_ != 0.0f) backend().axpby(slope_, c.doutputs[0], 1.0f - slope_, s.dx);
    c.dinputs[0] = s.dx;
  }

 private:
  float slope_;
};

}  // namespace

Expected<std::unique_ptr<graph::Operation>> make_relu(LayerConfig& c) {
  for (const char* k : {"negative_slope", "threshold"})
    if (auto st = c.allow(k, {0.0}); !st) return st.error();
  if (auto st = c.allow_null("max_value"); !st) return st.error();
  return std::unique_ptr<graph::Operation>(std::make_unique<Relu>("ReLU", c.name(), 0.0f));
}

Expected<std::unique_ptr<graph::Operation>> make_leaky_relu(LayerConfig& c) {
  auto slope = c.number("negative_slope", 0.3);
  if (!slope) return slope.error();
  if (*slope < 0.0 || *slope > 1.0) return c.error("negative_slope", "must be in [0, 1]");
  return std::unique_ptr<graph::Operation>(
      std::make_unique<Relu>("LeakyReLU", c.name(), static_cast<float>(*slope)));
}

}  // namespace troupe::core::layers
