// Keras's Dot of two [batch, d] inputs over their feature axis (axes=1 or -1): y [batch, 1]
// = the row-wise dot products. Other axes, inputs of other ranks, and normalize=True (the
// cosine) are refused.

#include <nlohmann/json.hpp>

#include "core/layers/layers.hpp"

namespace troupe::core::layers {

namespace {

struct DotState final : CallState {
  Tensor y, dx0, dx1;
};

class Dot final : public graph::Operation {
 public:
  std::vector<Kernel> kernels() const override { return {Kernel::row_dot, Kernel::scale_rows}; }
  explicit Dot(std::string name) : Operation("Dot", std::move(name)) {}

  Expected<std::vector<TensorSpec>> build(const std::vector<TensorSpec>& in) override {
    if (in.size() != 2 || in[0].kind != ColumnKind::floats || in[1].kind != ColumnKind::floats ||
        in[0].shape.size() != 1 || in[0] != in[1])
      return error("takes two float inputs of one shape [batch, d] (Troupe's Dot is 2-D), got " +
                   (in.size() == 2 ? in[0].to_string() + ", " + in[1].to_string()
                                   : std::to_string(in.size()) + " inputs"));
    return std::vector<TensorSpec>{{ColumnKind::floats, {1}}};
  }

  std::unique_ptr<CallState> make_state() const override { return std::make_unique<DotState>(); }

  Status forward(Call& c) override {
    auto& s = static_cast<DotState&>(*c.state);
    const int64_t b = c.inputs[0].batch();
    place(s.y, Shape{b, 1});
    backend().row_dot(c.inputs[0].tensor, c.inputs[1].tensor, s.y.view().reshaped(Shape{b}));
    c.outputs = {Ref{ColumnKind::floats, s.y, nullptr, Shape{b, 1}}};
    return {};
  }

  void backward(Call& c) override {
    auto& s = static_cast<DotState&>(*c.state);
    const ConstTensorView dy = c.doutputs[0].reshaped(Shape{c.inputs[0].batch()});
    // d/dx0 = dy x1 row by row, and the other way round.
    if (c.want_dinputs[0]) {
      backend().scale_rows(c.inputs[1].tensor, dy, place(s.dx0, c.inputs[0].shape), false);
      c.dinputs[0] = s.dx0;
    }
    if (c.want_dinputs[1]) {
      backend().scale_rows(c.inputs[0].tensor, dy, place(s.dx1, c.inputs[1].shape), false);
      c.dinputs[1] = s.dx1;
    }
  }
};

}  // namespace

Expected<std::unique_ptr<graph::Operation>> make_dot(LayerConfig& c) {
  const auto& axes = c.raw("axes");
  bool ok = false;
  auto feature = [](const nlohmann::json& a) {
    return a.is_number_integer() && (a.get<int64_t>() == 1 || a.get<int64_t>() == -1);
  };
  if (feature(axes)) ok = true;
  if (axes.is_array() && axes.size() == 2 && feature(axes[0]) && feature(axes[1])) ok = true;
  if (!ok)
    return c.error("axes", "Troupe's Dot takes 2-D inputs and axes=1 or -1 (the feature axis)");
  if (auto st = c.allow("normalize", {false}); !st) return st.error();
  return std::unique_ptr<graph::Operation>(std::make_unique<Dot>(c.name()));
}

}  // namespace troupe::core::layers
