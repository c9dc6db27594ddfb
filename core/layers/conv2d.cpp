// Keras's Conv2D, channels_last: x [batch, h, w, c] -> y = activation(conv(x, kernel) + bias)
// [batch, oh, ow, filters], with kernel_size, strides, padding "valid" or "same" (Keras's
// and TensorFlow's: the odd one out at the bottom and right), dilation_rate and groups = 1.
// The kernel is Keras's [kh, kw, c, filters]. The activation runs after the convolution,
// in place, as Dense's non-ReLU ones do.

#include "core/layers/layers.hpp"

namespace troupe::core::layers {

namespace {

struct Conv2dState final : CallState {
  Tensor y, z, dz, dx, scratch_dw, scratch_db;
  std::unique_ptr<Workspace> ws;
};

class Conv2D final : public graph::Operation {
 public:
  std::vector<Kernel> kernels() const override { return {Kernel::conv2d, Kernel::activation}; }
  Conv2D(std::string name, int64_t filters, std::vector<int64_t> kernel,
         std::vector<int64_t> strides, std::vector<int64_t> dilation, bool same, ActFn act,
         bool use_bias, Initializer kernel_init, Initializer bias_init)
      : Operation("Conv2D", std::move(name)),
        filters_(filters),
        kernel_(std::move(kernel)),
        strides_(std::move(strides)),
        dilation_(std::move(dilation)),
        same_(same),
        act_(act),
        use_bias_(use_bias),
        kernel_init_(kernel_init),
        bias_init_(bias_init) {}

  Expected<std::vector<TensorSpec>> build(const std::vector<TensorSpec>& in) override {
    if (in.size() != 1 || in[0].kind != ColumnKind::floats || in[0].shape.size() != 3)
      return error("takes one float input [height, width, channels], got " +
                   (in.empty() ? std::string("none") : in[0].to_string()));
    const int64_t h = in[0].shape[0], w = in[0].shape[1], c = in[0].shape[2];
    if (weights().empty()) {
      add_weight("kernel", Shape{kernel_[0], kernel_[1], c, filters_}, kernel_init_);
      if (use_bias_) add_weight("bias", Shape{filters_}, bias_init_);
    } else if (weights()[0].shape[2] != c) {
      return error("was built for " + std::to_string(weights()[0].shape[2]) +
                   " channels, called on " + in[0].to_string());
    }
    Conv2dGeometry g = geometry(h, w);
    const int64_t oh = window_output_size(h, effective(0), g.stride_h, same_);
    const int64_t ow = window_output_size(w, effective(1), g.stride_w, same_);
    if (oh <= 0 || ow <= 0)
      return error("its window (" + std::to_string(effective(0)) + " x " +
                   std::to_string(effective(1)) + " with dilation) does not fit in " +
                   in[0].to_string());
    return std::vector<TensorSpec>{{ColumnKind::floats, {oh, ow, filters_}}};
  }

  std::unique_ptr<CallState> make_state() const override { return std::make_unique<Conv2dState>(); }

  Status forward(Call& c) override {
    auto& s = static_cast<Conv2dState&>(*c.state);
    const Shape& xs = c.inputs[0].shape;
    const Conv2dGeometry g = geometry(xs[1], xs[2]);
    const Shape ys{xs[0], window_output_size(xs[1], effective(0), g.stride_h, same_),
                   window_output_size(xs[2], effective(1), g.stride_w, same_), filters_};
    place(s.y, ys);
    backend().conv2d_forward(g, c.inputs[0].tensor, weights()[0].value, bias(), s.y, s.ws,
                             precision());
    if (act_ != ActFn::linear) {
      // The backward pass of softmax, sigmoid, tanh and relu reads y; the others read z.
      if (!act_fn_uses_output(act_)) copy(s.y, place(s.z, ys));
      backend().activation_forward(act_, s.y, s.y);
    }
    c.outputs = {Ref{ColumnKind::floats, s.y, nullptr, ys}};
    return {};
  }

  void backward(Call& c) override {
    auto& s = static_cast<Conv2dState&>(*c.state);
    const Shape& xs = c.inputs[0].shape;
    const Conv2dGeometry g = geometry(xs[1], xs[2]);
    ConstTensorView dy = c.doutputs[0];
    if (act_ != ActFn::linear) {
      place(s.dz, s.y.shape());
      backend().activation_backward(act_, s.z, s.y, dy, s.dz);
      dy = s.dz;
    }
    const Shape& ks = weights()[0].shape;
    TensorView dw = c.dweights[0] != nullptr ? TensorView(place(*c.dweights[0], ks))
                                             : TensorView(place(s.scratch_dw, ks));
    TensorView db;
    if (use_bias_)
      db = c.dweights[1] != nullptr ? TensorView(place(*c.dweights[1], Shape{filters_}))
                                    : TensorView(place(s.scratch_db, Shape{filters_}));
    TensorView dx;
    if (c.want_dinputs[0]) dx = place(s.dx, xs);
    backend().conv2d_backward(g, c.inputs[0].tensor, weights()[0].value, dy, dw, db, dx, s.ws,
                              precision());
    if (c.want_dinputs[0]) c.dinputs[0] = s.dx;
  }

 private:
  int64_t effective(int axis) const {
    return (kernel_[static_cast<size_t>(axis)] - 1) * dilation_[static_cast<size_t>(axis)] + 1;
  }

  Conv2dGeometry geometry(int64_t h, int64_t w) const {
    Conv2dGeometry g;
    g.stride_h = strides_[0];
    g.stride_w = strides_[1];
    g.dilation_h = dilation_[0];
    g.dilation_w = dilation_[1];
    if (same_) {
      same_padding(h, effective(0), g.stride_h, g.pad_top, g.pad_bottom);
      same_padding(w, effective(1), g.stride_w, g.pad_left, g.pad_right);
    }
    return g;
  }

  ConstTensorView bias() const {
    return use_bias_ ? ConstTensorView(weights()[1].value) : ConstTensorView();
  }

  int64_t filters_;
  std::vector<int64_t> kernel_, strides_, dilation_;
  bool same_;
  ActFn act_;
  bool use_bias_;
  Initializer kernel_init_, bias_init_;
};

}  // namespace

Expected<std::unique_ptr<graph::Operation>> make_conv2d(LayerConfig& c) {
  auto filters = c.integer("filters");
  if (!filters) return filters.error();
  if (*filters <= 0) return c.error("filters", "must be positive");
  auto kernel = c.integers("kernel_size", 2);
  if (!kernel) return kernel.error();
  auto strides = c.integers("strides", 2, {1, 1});
  if (!strides) return strides.error();
  auto dilation = c.integers("dilation_rate", 2, {1, 1});
  if (!dilation) return dilation.error();
  auto positive = [](const std::vector<int64_t>& v) { return v[0] > 0 && v[1] > 0; };
  if (!positive(*kernel)) return c.error("kernel_size", "must be positive");
  if (!positive(*strides)) return c.error("strides", "must be positive");
  if (!positive(*dilation)) return c.error("dilation_rate", "must be positive");
  if (((*strides)[0] > 1 || (*strides)[1] > 1) && ((*dilation)[0] > 1 || (*dilation)[1] > 1))
    return c.error("dilation_rate", "cannot exceed 1 with strides above 1 (Keras refuses it too)");
  auto padding = c.string("padding", "valid");
  if (!padding) return padding.error();
  if (*padding != "valid" && *padding != "same")
    return c.error("padding", "Troupe supports \"valid\" and \"same\"");
  if (auto st = c.allow("data_format", {"channels_last"}); !st) return st.error();
  if (auto st = c.allow("groups", {1}); !st) return st.error();
  auto act = c.activation("activation");
  if (!act) return act.error();
  auto use_bias = c.boolean("use_bias", true);
  if (!use_bias) return use_bias.error();
  auto kernel_init = c.initializer("kernel_initializer",
                                   {Initializer::Kind::glorot_uniform, 0.0f, c.seed_for("kernel")});
  if (!kernel_init) return kernel_init.error();
  auto bias_init = c.initializer("bias_initializer", {Initializer::Kind::zeros, 0.0f, 0});
  if (!bias_init) return bias_init.error();
  for (const char* k : {"kernel_regularizer", "bias_regularizer", "activity_regularizer",
                        "kernel_constraint", "bias_constraint", "lora_rank"})
    if (auto st = c.allow_null(k); !st) return st.error();
  c.raw("lora_alpha");  // matters only with a lora_rank, refused above
  return std::unique_ptr<graph::Operation>(std::make_unique<Conv2D>(
      c.name(), *filters, std::move(*kernel), std::move(*strides), std::move(*dilation),
      *padding == "same", *act, *use_bias, *kernel_init, *bias_init));
}

}  // namespace troupe::core::layers
