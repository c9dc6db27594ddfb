// Keras's BatchNormalization over the last axis (channels last). Training (with the layer
// trainable) normalizes by the batch's own mean and biased variance and moves the moving
// statistics toward them, as Keras 3 does:
//   moving = moving * momentum + batch_stat * (1 - momentum)   (the biased variance too);
// inference, or training a frozen layer (Keras's trainable=False), normalizes by the moving
// statistics. y = gamma (x - mean) / sqrt(var + epsilon) + beta, in Keras's order of
// operations. Weights in Keras's order: gamma, beta (when scale, center), moving_mean,
// moving_variance (non-trainable).

#include <nlohmann/json.hpp>

#include "core/layers/layers.hpp"

namespace troupe::core::layers {

namespace {

struct BatchNormState final : CallState {
  Tensor y, dx, mean, var;
  bool batch_stats = false;
};

struct BatchNormArgs {
  int64_t axis = -1;
  float momentum = 0.99f, one_minus_momentum = 0.01f, epsilon = 1e-3f;
  bool center = true, scale = true;
  Initializer beta, gamma, moving_mean, moving_variance;
};

class BatchNormalization final : public graph::Operation {
 public:
  std::vector<Kernel> kernels() const override { return {Kernel::batch_norm, Kernel::axpby}; }
  BatchNormalization(std::string name, BatchNormArgs a)
      : Operation("BatchNormalization", std::move(name)), a_(a) {}

  Expected<std::vector<TensorSpec>> build(const std::vector<TensorSpec>& in) override {
    if (in.size() != 1 || in[0].kind != ColumnKind::floats || in[0].shape.empty())
      return error("takes one float input of rank >= 2, got " +
                   (in.empty() ? std::string("none") : in[0].to_string()));
    const auto rank = static_cast<int64_t>(in[0].shape.size()) + 1;
    if (a_.axis != -1 && a_.axis != rank - 1)
      return error("axis " + std::to_string(a_.axis) + " on " + in[0].to_string() +
                   " is not supported (Troupe normalizes the last axis, channels last)");
    const int64_t c = in[0].shape.back();
    if (weights().empty()) {
      if (a_.scale) add_weight("gamma", Shape{c}, a_.gamma);
      if (a_.center) add_weight("beta", Shape{c}, a_.beta);
      add_weight("moving_mean", Shape{c}, a_.moving_mean, /*trainable=*/false);
      add_weight("moving_variance", Shape{c}, a_.moving_variance, /*trainable=*/false);
    } else if (weights().back().shape[0] != c) {
      return error("was built for " + std::to_string(weights().back().shape[0]) +
                   " channels, called on " + in[0].to_string());
    }
    return in;
  }

  std::unique_ptr<CallState> make_state() const override {
    return std::make_unique<BatchNormState>();
  }
  bool uses_training() const override { return true; }

  Status forward(Call& c) override {
    auto& s = static_cast<BatchNormState&>(*c.state);
    const ConstTensorView x = as_rows(c.inputs[0].tensor);
    const int64_t ch = x.shape()[1];
    place(s.y, c.inputs[0].shape);
    s.batch_stats = c.training && trainable();
    Weight& moving_mean = weights()[moving()];
    Weight& moving_var = weights()[moving() + 1];
    if (s.batch_stats) {
      backend().moments(x, place(s.mean, Shape{ch}), place(s.var, Shape{ch}));
      backend().batch_norm_forward(x, s.mean, s.var, gamma(), beta(), a_.epsilon,
                                   as_rows(s.y.view()));
      backend().axpby(a_.one_minus_momentum, s.mean, a_.momentum, moving_mean.value);
      backend().axpby(a_.one_minus_momentum, s.var, a_.momentum, moving_var.value);
    } else {
      backend().batch_norm_forward(x, moving_mean.value, moving_var.value, gamma(), beta(),
                                   a_.epsilon, as_rows(s.y.view()));
    }
    c.outputs = {Ref{ColumnKind::floats, s.y, nullptr, c.inputs[0].shape}};
    return {};
  }

  void backward(Call& c) override {
    auto& s = static_cast<BatchNormState&>(*c.state);
    const ConstTensorView x = as_rows(c.inputs[0].tensor);
    const ConstTensorView mean =
        s.batch_stats ? ConstTensorView(s.mean) : weights()[moving()].value;
    const ConstTensorView var =
        s.batch_stats ? ConstTensorView(s.var) : weights()[moving() + 1].value;
    const Shape channels{x.shape()[1]};
    TensorView dx, dgamma, dbeta;
    if (c.want_dinputs[0]) dx = as_rows(place(s.dx, c.inputs[0].shape).view());
    if (a_.scale && c.dweights[0] != nullptr) dgamma = place(*c.dweights[0], channels);
    const size_t bi = a_.scale ? 1 : 0;
    if (a_.center && c.dweights[bi] != nullptr) dbeta = place(*c.dweights[bi], channels);
    backend().batch_norm_backward(x, mean, var, gamma(), a_.epsilon, s.batch_stats,
                                  as_rows(c.doutputs[0]), dx, dgamma, dbeta);
    if (c.want_dinputs[0]) c.dinputs[0] = s.dx;
  }

 private:
  size_t moving() const { return (a_.scale ? 1 : 0) + (a_.center ? 1 : 0); }
  ConstTensorView gamma() const {
    return a_.scale ? ConstTensorView(weights()[0].value) : ConstTensorView();
  }
  ConstTensorView beta() const {
    return a_.center ? ConstTensorView(weights()[a_.scale ? 1 : 0].value) : ConstTensorView();
  }

  BatchNormArgs a_;
};

// Keras saves an int; tf_keras 2 a list of one after building.
Expected<int64_t> single_axis(LayerConfig& c) {
  const auto& v = c.raw("axis");
  if (v.is_null()) return int64_t{-1};
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_array() && v.size() == 1 && v[0].is_number_integer()) return v[0].get<int64_t>();
  return c.error("axis", "Troupe normalizes over one axis, the last");
}

}  // namespace

Expected<std::unique_ptr<graph::Operation>> make_batch_normalization(LayerConfig& c) {
  BatchNormArgs a;
  auto axis = single_axis(c);
  if (!axis) return axis.error();
  a.axis = *axis;
  auto momentum = c.number("momentum", 0.99);
  if (!momentum) return momentum.error();
  a.momentum = static_cast<float>(*momentum);
  a.one_minus_momentum = static_cast<float>(1.0 - *momentum);  // as Keras: in double, then cast
  auto epsilon = c.number("epsilon", 1e-3);
  if (!epsilon) return epsilon.error();
  a.epsilon = static_cast<float>(*epsilon);
  auto center = c.boolean("center", true);
  if (!center) return center.error();
  auto scale = c.boolean("scale", true);
  if (!scale) return scale.error();
  a.center = *center;
  a.scale = *scale;
  using K = Initializer::Kind;
  struct {
    const char* key;
    Initializer* into;
    Initializer fallback;
  } inits[] = {
      {"beta_initializer", &a.beta, {K::zeros, 0.0f, c.seed_for("beta")}},
      {"gamma_initializer", &a.gamma, {K::constant, 1.0f, c.seed_for("gamma")}},
      {"moving_mean_initializer", &a.moving_mean, {K::zeros, 0.0f, c.seed_for("moving_mean")}},
      {"moving_variance_initializer",
       &a.moving_variance,
       {K::constant, 1.0f, c.seed_for("moving_variance")}}};
  for (auto& i : inits) {
    auto init = c.initializer(i.key, i.fallback);
    if (!init) return init.error();
    *i.into = *init;
  }
  for (const char* k : {"beta_regularizer", "gamma_regularizer", "beta_constraint",
                        "gamma_constraint", "renorm_clipping"})
    if (auto st = c.allow_null(k); !st) return st.error();
  if (auto st = c.allow("renorm", {false}); !st) return st.error();
  // Across replicas, the batch statistics would be the global batch's: not supported.
  if (auto st = c.allow("synchronized", {false}); !st) return st.error();
  c.raw("renorm_momentum");  // matters only with renorm, refused above
  return std::unique_ptr<graph::Operation>(std::make_unique<BatchNormalization>(c.name(), a));
}

}  // namespace troupe::core::layers
