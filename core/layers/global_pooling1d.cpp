// Keras's GlobalAveragePooling1D and GlobalMaxPooling1D: [batch, steps, features] ->
// [batch, features], the mean or the maximum over the steps (keepdims: [batch, 1,
// features]). channels_first ([batch, features, steps]) reduces the last axis instead: the
// same kernel on [batch * features, steps, 1]. The max's gradient goes to the first step
// holding the maximum. Masks are not supported (a masked input is refused by the model).

#include "core/layers/layers.hpp"

namespace troupe::core::layers {

namespace {

struct PoolState final : CallState {
  Tensor y, dx;
};

class GlobalPooling1D final : public graph::Operation {
 public:
  std::vector<Kernel> kernels() const override { return {Kernel::reduce_middle}; }
  GlobalPooling1D(std::string name, Reduce op, bool channels_first, bool keepdims)
      : Operation(op == Reduce::max ? "GlobalMaxPooling1D" : "GlobalAveragePooling1D",
                  std::move(name)),
        op_(op),
        channels_first_(channels_first),
        keepdims_(keepdims) {}

  Expected<std::vector<TensorSpec>> build(const std::vector<TensorSpec>& in) override {
    if (in.size() != 1 || in[0].kind != ColumnKind::floats || in[0].shape.size() != 2 ||
        in[0].shape[0] == 0 || in[0].shape[1] == 0)
      return error("takes one float input [batch, steps, features] with steps, features > 0, got " +
                   (in.empty() ? std::string("none") : in[0].to_string()));
    const int64_t d = channels_first_ ? in[0].shape[0] : in[0].shape[1];
    TensorSpec out{ColumnKind::floats, {d}};
    if (keepdims_)
      out.shape = channels_first_ ? std::vector<int64_t>{d, 1} : std::vector<int64_t>{1, d};
    return std::vector<TensorSpec>{out};
  }

  std::unique_ptr<CallState> make_state() const override { return std::make_unique<PoolState>(); }

  Status forward(Call& c) override {
    auto& s = static_cast<PoolState&>(*c.state);
    const Ref& x = c.inputs[0];
    const Shape out = output_shape(x.shape);
    place(s.y, out);
    backend().reduce_middle(op_, x.tensor.reshaped(cube(x.shape)),
                            s.y.view().reshaped(rows(x.shape)));
    c.outputs = {Ref{ColumnKind::floats, s.y, nullptr, out}};
    return {};
  }

  void backward(Call& c) override {
    auto& s = static_cast<PoolState&>(*c.state);
    if (!c.want_dinputs[0]) return;
    const Ref& x = c.inputs[0];
    place(s.dx, x.shape);
    backend().reduce_middle_backward(
        op_, x.tensor.reshaped(cube(x.shape)), s.y.view().reshaped(rows(x.shape)),
        c.doutputs[0].reshaped(rows(x.shape)), s.dx.view().reshaped(cube(x.shape)));
    c.dinputs[0] = s.dx;
  }

 private:
  // The input as reduce_middle's [a, m, c] and the output as its [a, c].
  Shape cube(const Shape& x) const { return channels_first_ ? Shape{x[0] * x[1], x[2], 1} : x; }
  Shape rows(const Shape& x) const {
    return channels_first_ ? Shape{x[0] * x[1], 1} : Shape{x[0], x[2]};
  }
  Shape output_shape(const Shape& x) const {
    const int64_t d = channels_first_ ? x[1] : x[2];
    if (!keepdims_) return Shape{x[0], d};
    return channels_first_ ? Shape{x[0], d, 1} : Shape{x[0], 1, d};
  }

  Reduce op_;
  bool channels_first_, keepdims_;
};

Expected<std::unique_ptr<graph::Operation>> make_pooling(LayerConfig& c, Reduce op) {
  auto format = c.string("data_format", "channels_last");
  if (!format) return format.error();
  if (*format != "channels_last" && *format != "channels_first")
    return c.error("data_format", "must be 'channels_last' or 'channels_first'");
  auto keepdims = c.boolean("keepdims", false);
  if (!keepdims) return keepdims.error();
  return std::unique_ptr<graph::Operation>(
      std::make_unique<GlobalPooling1D>(c.name(), op, *format == "channels_first", *keepdims));
}

}  // namespace

Expected<std::unique_ptr<graph::Operation>> make_global_average_pooling1d(LayerConfig& c) {
  return make_pooling(c, Reduce::mean);
}

Expected<std::unique_ptr<graph::Operation>> make_global_max_pooling1d(LayerConfig& c) {
  return make_pooling(c, Reduce::max);
}

}  // namespace troupe::core::layers
