// Keras's Identity: its input, unchanged (a view), and the gradient likewise.

#include "core/layers/layers.hpp"

namespace troupe::core::graph {

namespace {

class Identity final : public Layer {
 public:
  explicit Identity(std::string name) : Layer("Identity", std::move(name)) {}

  Expected<std::vector<TensorSpec>> build(const std::vector<TensorSpec>& in) override {
    if (in.size() != 1 || in[0].kind != ColumnKind::floats) return error("takes one float input");
    return in;
  }

  Status forward(Call& c) override {
    c.outputs = {c.inputs[0]};
    return {};
  }

  void backward(Call& c) override {
    if (c.want_dinputs[0]) c.dinputs[0] = c.doutputs[0];
  }
};

}  // namespace

Expected<std::unique_ptr<Layer>> make_identity(LayerConfig& c) {
  return std::unique_ptr<Layer>(std::make_unique<Identity>(c.name()));
}

}  // namespace troupe::core::graph
