// The cross layer of DCN-v2 (TensorFlow Recommenders' tfrs.layers.dcn.Cross, registered as
// "Custom>Cross"), called on [x0, x] or on x0 alone (x = x0), both [batch, ..., d]:
//   y = x0 * (x W + b + diag_scale x) + x,
// W [d, d] full rank, or U V (U [d, p], V [p, d]) with projection_dim p. Its weights in
// TFRS's order: full rank "dense_kernel" W, "dense_bias" b; low rank "dense_u_kernel" U,
// "dense_v_kernel" V, "dense_v_bias" b (no bias with use_bias=False). The Keras 3 layer
// with these variables is in tests/keras/sparse_fixtures.py.

#include "core/layers/layers.hpp"

namespace troupe::core::layers {

namespace {

struct CrossState final : CallState {
  Tensor h, p, y, dp, dh, dx, dx0, dx_dense, zero_bias, scratch_dw, scratch_du, scratch_db,
      scratch_dbu;
};

class Cross final : public graph::Operation {
 public:
  std::vector<Kernel> kernels() const override {
    return {Kernel::dense, Kernel::axpby, Kernel::multiply};
  }
  Cross(std::string name, int64_t projection, float diag, bool use_bias, Initializer kernel_init,
        Initializer bias_init)
      : Operation("Cross", std::move(name)),
        projection_(projection),
        diag_(diag),
        use_bias_(use_bias),
        kernel_init_(kernel_init),
        bias_init_(bias_init) {}

  Expected<std::vector<TensorSpec>> build(const std::vector<TensorSpec>& in) override {
    if (in.empty() || in.size() > 2 || in[0].kind != ColumnKind::floats || in[0].shape.empty())
      return error("takes [x0] or [x0, x], float tensors [..., d], got " + describe(in));
    if (in.size() == 2 && in[1] != in[0])
      return error("takes x0 and x of one shape, got " + describe(in));
    const int64_t d = in[0].shape.back();
    if (weights().empty()) {
      if (projection_ == 0) {
        add_weight("dense_kernel", Shape{d, d}, kernel_init_);
        if (use_bias_) add_weight("dense_bias", Shape{d}, bias_init_);
      } else {
        add_weight("dense_u_kernel", Shape{d, projection_}, kernel_init_);
        add_weight("dense_v_kernel", Shape{projection_, d}, kernel_init_);
        if (use_bias_) add_weight("dense_v_bias", Shape{d}, bias_init_);
      }
    } else if (weights()[0].shape[0] != d) {
      return error("was built for inputs of last axis " + std::to_string(weights()[0].shape[0]) +
                   ", called on " + in[0].to_string());
    }
    return std::vector<TensorSpec>{in[0]};
  }
  std::unique_ptr<CallState> make_state() const override { return std::make_unique<CrossState>(); }

  Status forward(Call& c) override {
    auto& s = static_cast<CrossState&>(*c.state);
    const ConstTensorView x0 = as_rows(c.inputs[0].tensor);
    const ConstTensorView x = as_rows(c.inputs.back().tensor);
    const int64_t n = x.shape()[0], d = x.shape()[1];
    // p = x W + b (+ diag_scale x), kept for the backward pass.
    place(s.p, Shape{n, d});
    if (projection_ == 0) {
      backend().dense_forward(x, weights()[0].value, bias(s, d), s.p, precision());
    } else {
      place(s.h, Shape{n, projection_});
      backend().dense_forward(x, weights()[0].value, zeros(s, projection_), s.h, precision());
      backend().dense_forward(s.h, weights()[1].value, bias(s, d), s.p, precision());
    }
    if (diag_ != 0.0f) backend().axpby(diag_, x, 1.0f, s.p);
    // y = x0 * p + x.
    place(s.y, Shape{n, d});
    copy(x, s.y);
    backend().multiply(x0, s.p, s.y, /*accumulate=*/true);
    c.outputs = {Ref{ColumnKind::floats, s.y.view().reshaped(c.inputs[0].shape), nullptr,
                     c.inputs[0].shape}};
    return {};
  }

  void backward(Call& c) override {
    auto& s = static_cast<CrossState&>(*c.state);
    const ConstTensorView x0 = as_rows(c.inputs[0].tensor);
    const ConstTensorView x = as_rows(c.inputs.back().tensor);
    const ConstTensorView dy = as_rows(c.doutputs[0]);
    const int64_t n = x.shape()[0], d = x.shape()[1];
    const bool one_input = c.inputs.size() == 1;
    const bool want_x = c.want_dinputs.back();
    // dp = dy * x0: the gradient of p, through which the weights and x are reached.
    place(s.dp, Shape{n, d});
    backend().multiply(dy, x0, s.dp, /*accumulate=*/false);
    TensorView dx_dense;
    if (want_x) dx_dense = place(s.dx_dense, Shape{n, d});
    const size_t bias_at = projection_ == 0 ? 1 : 2;
    TensorView db = use_bias_ && c.dweights[bias_at] != nullptr
                        ? TensorView(place(*c.dweights[bias_at], Shape{d}))
                        : TensorView(place(s.scratch_db, Shape{d}));
    if (projection_ == 0) {
      backend().dense_backward(x, weights()[0].value, s.dp, gradient(c, 0, s.scratch_dw), db,
                               dx_dense, precision());
    } else {
      place(s.dh, Shape{n, projection_});
      backend().dense_backward(s.h, weights()[1].value, s.dp, gradient(c, 1, s.scratch_dw), db,
                               s.dh, precision());
      backend().dense_backward(x, weights()[0].value, s.dh, gradient(c, 0, s.scratch_du),
                               place(s.scratch_dbu, Shape{projection_}), dx_dense, precision());
    }
    if (want_x) {
      // dx = dp W^T + diag_scale dp + dy (+ dy * p when x is x0).
      place(s.dx, Shape{n, d});
      copy(dy, s.dx);
      backend().add(s.dx_dense, s.dx);
      if (diag_ != 0.0f) backend().axpby(diag_, s.dp, 1.0f, s.dx);
      if (one_input) backend().multiply(dy, s.p, s.dx, /*accumulate=*/true);
      c.dinputs.back() = s.dx.view().reshaped(c.inputs[0].shape);
    }
    if (!one_input && c.want_dinputs[0]) {
      place(s.dx0, Shape{n, d});
      backend().multiply(dy, s.p, s.dx0, /*accumulate=*/false);
      c.dinputs[0] = s.dx0.view().reshaped(c.inputs[0].shape);
    }
  }

 private:
  static std::string describe(const std::vector<TensorSpec>& in) {
    std::string s;
    for (const auto& t : in)
      s += (s.empty() ? "" : ", ") + t.to_string();
    return s.empty() ? "none" : s;
  }

  // Where weight i's gradient goes (a scratch tensor when it is not wanted).
  TensorView gradient(Call& c, size_t i, Tensor& scratch) {
    const Shape& shape = weights()[i].shape;
    return c.dweights[i] != nullptr ? TensorView(place(*c.dweights[i], shape))
                                    : TensorView(place(scratch, shape));
  }

  ConstTensorView zeros(CrossState& s, int64_t n) {
    if (s.zero_bias.device() != device() || s.zero_bias.size() < n)
      s.zero_bias = Tensor(Shape{std::max<int64_t>(n, 1)}, DType::float32, device());
    return ConstTensorView(s.zero_bias).reshaped(Shape{n});
  }

  ConstTensorView bias(CrossState& s, int64_t d) {
    if (use_bias_) return weights()[projection_ == 0 ? 1 : 2].value;
    return zeros(s, d);
  }

  int64_t projection_;  // 0: full rank
  float diag_;
  bool use_bias_;
  Initializer kernel_init_, bias_init_;
};

}  // namespace

Expected<std::unique_ptr<graph::Operation>> make_cross(LayerConfig& c) {
  int64_t p = 0;  // null: full rank
  if (c.has("projection_dim")) {
    auto v = c.integer("projection_dim");
    if (!v) return v.error();
    if (*v <= 0) return c.error("projection_dim", "must be positive or null (full rank)");
    p = *v;
  } else {
    c.raw("projection_dim");
  }
  auto diag = c.number("diag_scale", 0.0);
  if (!diag) return diag.error();
  if (*diag < 0.0) return c.error("diag_scale", "must not be negative");
  auto use_bias = c.boolean("use_bias", true);
  if (!use_bias) return use_bias.error();
  // The activation of the product before the multiplication with x0: only none.
  if (auto st = c.allow("preactivation", {"linear"}); !st) return st.error();
  auto kernel = c.initializer("kernel_initializer",
                              {Initializer::Kind::glorot_uniform, 0.0f, c.seed_for("kernel")});
  if (!kernel) return kernel.error();
  auto bias = c.initializer("bias_initializer", {Initializer::Kind::zeros, 0.0f, 0});
  if (!bias) return bias.error();
  for (const char* k : {"kernel_regularizer", "bias_regularizer", "activity_regularizer"})
    if (auto st = c.allow_null(k); !st) return st.error();
  // Casting float inputs to the compute dtype: Troupe's layers compute in float32 anyway.
  if (auto autocast = c.boolean("autocast", true); !autocast) return autocast.error();
  return std::unique_ptr<graph::Operation>(
      std::make_unique<Cross>(c.name(), p, static_cast<float>(*diag), *use_bias, *kernel, *bias));
}

}  // namespace troupe::core::layers
