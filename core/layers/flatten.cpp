// Keras's Flatten: [batch, d1, d2, ...] -> [batch, d1 * d2 * ...] (a rank-1 input becomes
// [batch, 1]). Channels-last order, so the output is a view of the input and its gradient
// a view of the output's. data_format="channels_first" transposes first in Keras: refused
// for inputs of rank > 2 (where it would differ).

#include "core/layers/layers.hpp"

namespace troupe::core::layers {

namespace {

class Flatten final : public graph::Operation {
 public:
  std::vector<Kernel> kernels() const override { return {}; }
  Flatten(std::string name, bool channels_first)
      : Operation("Flatten", std::move(name)), channels_first_(channels_first) {}

  Expected<std::vector<TensorSpec>> build(const std::vector<TensorSpec>& in) override {
    if (in.size() != 1 || in[0].kind != ColumnKind::floats) return error("takes one float input");
    if (channels_first_ && in[0].shape.size() > 1)
      return error("data_format='channels_first' on " + in[0].to_string() +
                   " is not supported (Troupe flattens channels-last)");
    return std::vector<TensorSpec>{{ColumnKind::floats, {in[0].per_example()}}};
  }

  Status forward(Call& c) override {
    const Ref& x = c.inputs[0];
    int64_t n = 1;
    for (int i = 1; i < x.shape.rank(); ++i)
      n *= x.shape[i];
    const Shape out{x.batch(), n};
    c.outputs = {Ref{ColumnKind::floats, x.tensor.reshaped(out), nullptr, out}};
    return {};
  }

  void backward(Call& c) override {
    if (c.want_dinputs[0]) c.dinputs[0] = c.doutputs[0].reshaped(c.inputs[0].shape);
  }

 private:
  bool channels_first_;
};

}  // namespace

Expected<std::unique_ptr<graph::Operation>> make_flatten(LayerConfig& c) {
  auto format = c.string("data_format", "channels_last");
  if (!format) return format.error();
  if (*format != "channels_last" && *format != "channels_first")
    return c.error("data_format", "must be 'channels_last' or 'channels_first'");
  return std::unique_ptr<graph::Operation>(
      std::make_unique<Flatten>(c.name(), *format == "channels_first"));
}

}  // namespace troupe::core::layers
