// Keras's GlobalAveragePooling2D, channels_last: x [batch, h, w, c] -> the mean over h and
// w, [batch, c] (keepdims: [batch, 1, 1, c]): the generic mean of [batch, h w, c] over its
// middle axis.

#include "core/layers/layers.hpp"

namespace troupe::core::layers {

namespace {

struct GlobalPoolState final : CallState {
  Tensor y, dx;
};

class GlobalAveragePooling2D final : public graph::Operation {
 public:
  std::vector<Kernel> kernels() const override { return {Kernel::reduce}; }
  GlobalAveragePooling2D(std::string name, bool keepdims)
      : Operation("GlobalAveragePooling2D", std::move(name)), keepdims_(keepdims) {}

  Expected<std::vector<TensorSpec>> build(const std::vector<TensorSpec>& in) override {
    if (in.size() != 1 || in[0].kind != ColumnKind::floats || in[0].shape.size() != 3)
      return error("takes one float input [height, width, channels], got " +
                   (in.empty() ? std::string("none") : in[0].to_string()));
    const int64_t c = in[0].shape[2];
    TensorSpec out{ColumnKind::floats,
                   keepdims_ ? std::vector<int64_t>{1, 1, c} : std::vector<int64_t>{c}};
    return std::vector<TensorSpec>{out};
  }
  std::unique_ptr<CallState> make_state() const override {
    return std::make_unique<GlobalPoolState>();
  }

  Status forward(Call& c) override {
    auto& s = static_cast<GlobalPoolState&>(*c.state);
    const Shape& xs = c.inputs[0].shape;
    place(s.y, Shape{xs[0], 1, xs[3]});
    backend().reduce(Reduce::mean, c.inputs[0].tensor.reshaped(Shape{xs[0], xs[1] * xs[2], xs[3]}),
                     s.y);
    const Shape out = keepdims_ ? Shape{xs[0], 1, 1, xs[3]} : Shape{xs[0], xs[3]};
    c.outputs = {Ref{ColumnKind::floats, s.y.view().reshaped(out), nullptr, out}};
    return {};
  }

  void backward(Call& c) override {
    if (!c.want_dinputs[0]) return;
    auto& s = static_cast<GlobalPoolState&>(*c.state);
    const Shape& xs = c.inputs[0].shape;
    place(s.dx, xs);
    const Shape rows{xs[0], xs[1] * xs[2], xs[3]};
    backend().reduce_backward(Reduce::mean, c.inputs[0].tensor.reshaped(rows), s.y,
                              c.doutputs[0].reshaped(s.y.shape()), s.dx.view().reshaped(rows),
                              false);
    c.dinputs[0] = s.dx;
  }

 private:
  bool keepdims_;
};

}  // namespace

Expected<std::unique_ptr<graph::Operation>> make_global_average_pooling2d(LayerConfig& c) {
  if (auto st = c.allow("data_format", {"channels_last"}); !st) return st.error();
  auto keepdims = c.boolean("keepdims", false);
  if (!keepdims) return keepdims.error();
  return std::unique_ptr<graph::Operation>(
      std::make_unique<GlobalAveragePooling2D>(c.name(), *keepdims));
}

}  // namespace troupe::core::layers
