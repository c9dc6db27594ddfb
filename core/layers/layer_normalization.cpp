// Keras's LayerNormalization over the last axis: each row (example, or position of a
// sequence) normalized by its own mean and biased variance,
//   y = gamma (x - mean) / sqrt(var + epsilon) + beta,
// in Keras's order of operations; training and inference alike. Weights: gamma, beta (when
// scale, center). Several axes, and the deprecated rms_scaling, are refused.

#include <nlohmann/json.hpp>

#include "core/layers/layers.hpp"

namespace troupe::core::layers {

namespace {

struct LayerNormState final : CallState {
  Tensor y, dx, mean, rstd;
};

class LayerNormalization final : public graph::Operation {
 public:
  std::vector<Kernel> kernels() const override { return {Kernel::layer_norm}; }
  LayerNormalization(std::string name, int64_t axis, float epsilon, bool center, bool scale,
                     Initializer beta, Initializer gamma)
      : Operation("LayerNormalization", std::move(name)),
        axis_(axis),
        epsilon_(epsilon),
        center_(center),
        scale_(scale),
        beta_init_(beta),
        gamma_init_(gamma) {}

  Expected<std::vector<TensorSpec>> build(const std::vector<TensorSpec>& in) override {
    if (in.size() != 1 || in[0].kind != ColumnKind::floats || in[0].shape.empty())
      return error("takes one float input of rank >= 2, got " +
                   (in.empty() ? std::string("none") : in[0].to_string()));
    const auto rank = static_cast<int64_t>(in[0].shape.size()) + 1;
    if (axis_ != -1 && axis_ != rank - 1)
      return error("axis " + std::to_string(axis_) + " on " + in[0].to_string() +
                   " is not supported (Troupe normalizes the last axis)");
    const int64_t c = in[0].shape.back();
    if (weights().empty()) {
      if (scale_) add_weight("gamma", Shape{c}, gamma_init_);
      if (center_) add_weight("beta", Shape{c}, beta_init_);
    } else if (weights()[0].shape[0] != c) {
      return error("was built for a last axis of " + std::to_string(weights()[0].shape[0]) +
                   ", called on " + in[0].to_string());
    }
    return in;
  }

  std::unique_ptr<CallState> make_state() const override {
    return std::make_unique<LayerNormState>();
  }

  Status forward(Call& c) override {
    auto& s = static_cast<LayerNormState&>(*c.state);
    const ConstTensorView x = as_rows(c.inputs[0].tensor);
    const Shape rows{x.shape()[0]};
    place(s.y, c.inputs[0].shape);
    backend().layer_norm_forward(x, gamma(), beta(), epsilon_, as_rows(s.y.view()),
                                 place(s.mean, rows), place(s.rstd, rows));
    c.outputs = {Ref{ColumnKind::floats, s.y, nullptr, c.inputs[0].shape}};
    return {};
  }

  void backward(Call& c) override {
    auto& s = static_cast<LayerNormState&>(*c.state);
    const ConstTensorView x = as_rows(c.inputs[0].tensor);
    const Shape channels{x.shape()[1]};
    TensorView dx, dgamma, dbeta;
    if (c.want_dinputs[0]) dx = as_rows(place(s.dx, c.inputs[0].shape).view());
    if (scale_ && c.dweights[0] != nullptr) dgamma = place(*c.dweights[0], channels);
    const size_t bi = scale_ ? 1 : 0;
    if (center_ && c.dweights[bi] != nullptr) dbeta = place(*c.dweights[bi], channels);
    backend().layer_norm_backward(x, gamma(), s.mean, s.rstd, as_rows(c.doutputs[0]), dx, dgamma,
                                  dbeta);
    if (c.want_dinputs[0]) c.dinputs[0] = s.dx;
  }

 private:
  ConstTensorView gamma() const {
    return scale_ ? ConstTensorView(weights()[0].value) : ConstTensorView();
  }
  ConstTensorView beta() const {
    return center_ ? ConstTensorView(weights()[scale_ ? 1 : 0].value) : ConstTensorView();
  }

  int64_t axis_;
  float epsilon_;
  bool center_, scale_;
  Initializer beta_init_, gamma_init_;
};

}  // namespace

Expected<std::unique_ptr<graph::Operation>> make_layer_normalization(LayerConfig& c) {
  // Keras 3 saves the axis as given (-1) or, once built, as a list ([-1]).
  const auto& v = c.raw("axis");
  int64_t axis = -1;
  if (v.is_number_integer())
    axis = v.get<int64_t>();
  else if (v.is_array() && v.size() == 1 && v[0].is_number_integer())
    axis = v[0].get<int64_t>();
  else if (!v.is_null())
    return c.error("axis", "Troupe normalizes over one axis, the last");
  auto epsilon = c.number("epsilon", 1e-3);
  if (!epsilon) return epsilon.error();
  auto center = c.boolean("center", true);
  if (!center) return center.error();
  auto scale = c.boolean("scale", true);
  if (!scale) return scale.error();
  using K = Initializer::Kind;
  auto beta = c.initializer("beta_initializer", {K::zeros, 0.0f, c.seed_for("beta")});
  if (!beta) return beta.error();
  auto gamma = c.initializer("gamma_initializer", {K::constant, 1.0f, c.seed_for("gamma")});
  if (!gamma) return gamma.error();
  for (const char* k :
       {"beta_regularizer", "gamma_regularizer", "beta_constraint", "gamma_constraint"})
    if (auto st = c.allow_null(k); !st) return st.error();
  if (auto st = c.allow("rms_scaling", {false}); !st) return st.error();
  return std::unique_ptr<graph::Operation>(std::make_unique<LayerNormalization>(
      c.name(), axis, static_cast<float>(*epsilon), *center, *scale, *beta, *gamma));
}

}  // namespace troupe::core::layers
