// Keras's Identity: its input, unchanged (a view), and the gradient likewise.

#include "core/layers/layers.hpp"

namespace troupe::core::layers {

namespace {

class Identity final : public graph::Operation {
 public:
  std::vector<Kernel> kernels() const override { return {}; }
  explicit Identity(std::string name) : Operation("Identity", std::move(name)) {}

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

Expected<std::unique_ptr<graph::Operation>> make_identity(LayerConfig& c) {
  return std::unique_ptr<graph::Operation>(std::make_unique<Identity>(c.name()));
}

}  // namespace troupe::core::layers
