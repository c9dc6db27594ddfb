// Keras's Rescaling: y = x * scale + offset, element-wise, any shape. A per-channel scale
// or offset (a list) is refused.

#include <nlohmann/json.hpp>

#include "core/layers/layers.hpp"

namespace troupe::core::layers {

namespace {

struct RescalingState final : CallState {
  Tensor y, dx;
};

class Rescaling final : public graph::Operation {
 public:
  std::vector<Kernel> kernels() const override { return {Kernel::axpby}; }
  Rescaling(std::string name, float scale, float offset)
      : Operation("Rescaling", std::move(name)), scale_(scale), offset_(offset) {}

  Expected<std::vector<TensorSpec>> build(const std::vector<TensorSpec>& in) override {
    if (in.size() != 1 || in[0].kind != ColumnKind::floats) return error("takes one float input");
    return in;
  }

  std::unique_ptr<CallState> make_state() const override {
    return std::make_unique<RescalingState>();
  }

  Status forward(Call& c) override {
    auto& s = static_cast<RescalingState&>(*c.state);
    const Ref& x = c.inputs[0];
    TensorView y = place(s.y, x.shape);
    if (offset_ != 0.0f) backend().fill(y, offset_);
    backend().axpby(scale_, x.tensor, offset_ != 0.0f ? 1.0f : 0.0f, y);
    c.outputs = {Ref{ColumnKind::floats, y, nullptr, x.shape}};
    return {};
  }

  void backward(Call& c) override {
    auto& s = static_cast<RescalingState&>(*c.state);
    if (!c.want_dinputs[0]) return;
    backend().axpby(scale_, c.doutputs[0], 0.0f, place(s.dx, c.inputs[0].shape));
    c.dinputs[0] = s.dx;
  }

 private:
  float scale_, offset_;
};

}  // namespace

Expected<std::unique_ptr<graph::Operation>> make_rescaling(LayerConfig& c) {
  if (!c.has("scale")) return c.error("scale", "is required");
  const auto& scale = c.raw("scale");
  if (!scale.is_number())
    return c.error("scale", "must be a number (Troupe has no per-channel scale)");
  const auto& offset = c.raw("offset");
  if (!offset.is_null() && !offset.is_number())
    return c.error("offset", "must be a number (Troupe has no per-channel offset)");
  return std::unique_ptr<graph::Operation>(
      std::make_unique<Rescaling>(c.name(), graph::to_float(scale.get<double>()),
                                  offset.is_null() ? 0.0f : graph::to_float(offset.get<double>())));
}

}  // namespace troupe::core::layers
