// Keras's Dense: y = activation(x kernel + bias) over the last axis of x ([..., in] ->
// [..., units]). A ReLU is fused into the product where the backend can (oneDNN's post-op);
// other activations run after it, in place.

#include "core/layers/layers.hpp"

namespace troupe::core::layers {

namespace {

struct DenseState final : CallState {
  Tensor y, dz, dx, zero_bias, scratch_db;
};

class Dense final : public graph::Operation {
 public:
  std::vector<Kernel> kernels() const override { return {Kernel::dense, Kernel::activation}; }
  Dense(std::string name, int64_t units, ActFn act, bool use_bias, Initializer kernel_init,
        Initializer bias_init)
      : Operation("Dense", std::move(name)),
        units_(units),
        act_(act),
        use_bias_(use_bias),
        kernel_init_(kernel_init),
        bias_init_(bias_init) {}

  Expected<std::vector<TensorSpec>> build(const std::vector<TensorSpec>& in) override {
    if (in.size() != 1 || in[0].kind != ColumnKind::floats || in[0].shape.empty())
      return error("takes one float input of rank >= 2, got " +
                   (in.empty() ? std::string("none") : in[0].to_string()));
    const int64_t d = in[0].shape.back();
    if (weights().empty()) {
      add_weight("kernel", Shape{d, units_}, kernel_init_);
      if (use_bias_) add_weight("bias", Shape{units_}, bias_init_);
    } else if (weights()[0].shape[0] != d) {
      return error("was built for inputs of last axis " + std::to_string(weights()[0].shape[0]) +
                   ", called on " + in[0].to_string());
    }
    TensorSpec out = in[0];
    out.shape.back() = units_;
    return std::vector<TensorSpec>{out};
  }

  std::unique_ptr<CallState> make_state() const override { return std::make_unique<DenseState>(); }

  Status forward(Call& c) override {
    auto& s = static_cast<DenseState&>(*c.state);
    const ConstTensorView x = as_rows(c.inputs[0].tensor);
    Shape out_shape = c.inputs[0].shape;
    out_shape[out_shape.rank() - 1] = units_;
    place(s.y, Shape{x.shape()[0], units_});
    const ConstTensorView w = weights()[0].value;
    const ConstTensorView b = bias(s);
    if (act_ == ActFn::relu) {
      backend().dense_relu_forward(x, w, b, s.y, precision());
    } else {
      backend().dense_forward(x, w, b, s.y, precision());
      if (act_ != ActFn::linear) {
        // The backward pass of softmax, sigmoid and tanh reads y; the others read z = x w + b,
        // kept in dz until the backward pass needs that buffer.
        if (!act_fn_uses_output(act_)) copy(s.y, place(s.dz, s.y.shape()));
        backend().activation_forward(act_, s.y, s.y);
      }
    }
    c.outputs = {Ref{ColumnKind::floats, s.y.view().reshaped(out_shape), nullptr, out_shape}};
    return {};
  }

  void backward(Call& c) override {
    auto& s = static_cast<DenseState&>(*c.state);
    const ConstTensorView x = as_rows(c.inputs[0].tensor);
    const ConstTensorView dy = as_rows(c.doutputs[0]);
    const ConstTensorView w = weights()[0].value;
    TensorView dx;
    if (c.want_dinputs[0]) dx = place(s.dx, x.shape());
    Tensor scratch_dw;
    TensorView dw = c.dweights[0] != nullptr ? TensorView(place(*c.dweights[0], w.shape()))
                                             : TensorView(place(scratch_dw, w.shape()));
    TensorView db = use_bias_ && c.dweights[1] != nullptr
                        ? TensorView(place(*c.dweights[1], Shape{units_}))
                        : TensorView(place(s.scratch_db, Shape{units_}));
    if (act_ == ActFn::relu) {
      backend().dense_relu_backward(x, w, s.y, dy, place(s.dz, s.y.shape()), dw, db, dx,
                                    precision());
    } else if (act_ == ActFn::linear) {
      backend().dense_backward(x, w, dy, dw, db, dx, precision());
    } else {
      // dz = f'(z) dy, in dz (which held z for the functions that read it).
      place(s.dz, s.y.shape());
      backend().activation_backward(act_, s.dz, s.y, dy, s.dz);
      backend().dense_backward(x, w, s.dz, dw, db, dx, precision());
    }
    if (c.want_dinputs[0]) c.dinputs[0] = s.dx.view().reshaped(c.inputs[0].shape);
  }

 private:
  ConstTensorView bias(DenseState& s) {
    if (use_bias_) return weights()[1].value;
    if (s.zero_bias.device() != device() || s.zero_bias.size() != units_)
      s.zero_bias = Tensor(Shape{units_}, DType::float32, device());
    return s.zero_bias;
  }

  int64_t units_;
  ActFn act_;
  bool use_bias_;
  Initializer kernel_init_, bias_init_;
};

}  // namespace

Expected<std::unique_ptr<graph::Operation>> make_dense(LayerConfig& c) {
  auto units = c.integer("units");
  if (!units) return units.error();
  if (*units <= 0) return c.error("units", "must be positive");
  auto act = c.activation("activation");
  if (!act) return act.error();
  auto use_bias = c.boolean("use_bias", true);
  if (!use_bias) return use_bias.error();
  auto kernel = c.initializer("kernel_initializer",
                              {Initializer::Kind::glorot_uniform, 0.0f, c.seed_for("kernel")});
  if (!kernel) return kernel.error();
  auto bias = c.initializer("bias_initializer", {Initializer::Kind::zeros, 0.0f, 0});
  if (!bias) return bias.error();
  for (const char* k : {"kernel_regularizer", "bias_regularizer", "activity_regularizer",
                        "kernel_constraint", "bias_constraint", "lora_rank", "quantization_config"})
    if (auto st = c.allow_null(k); !st) return st.error();
  c.raw("lora_alpha");  // matters only with a lora_rank, refused above
  return std::unique_ptr<graph::Operation>(
      std::make_unique<Dense>(c.name(), *units, *act, *use_bias, *kernel, *bias));
}

}  // namespace troupe::core::layers
