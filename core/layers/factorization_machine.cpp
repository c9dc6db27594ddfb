// Troupe's FactorizationMachine layer (registered in Keras as "troupe>FactorizationMachine";
// its Keras 3 definition is in tests/keras/sparse_fixtures.py): the pairwise interactions
// of F field embeddings of width k, x [batch, F, k] -> [batch, 1],
//   y = 1/2 sum_k ((sum_f x)^2 - sum_f x^2) = sum over pairs f < g of <x_f, x_g>,
// so that DeepFM is an ordinary graph (Embedding -> FactorizationMachine, next to the
// linear part and the MLP). No weights.

#include "core/layers/layers.hpp"

namespace troupe::core::layers {

namespace {

struct FmState final : CallState {
  Tensor y, dx;
};

class FactorizationMachine final : public graph::Operation {
 public:
  std::vector<Kernel> kernels() const override { return {Kernel::fm}; }
  explicit FactorizationMachine(std::string name)
      : Operation("FactorizationMachine", std::move(name)) {}

  Expected<std::vector<TensorSpec>> build(const std::vector<TensorSpec>& in) override {
    if (in.size() != 1 || in[0].kind != ColumnKind::floats || in[0].shape.size() != 2)
      return error("takes one float input [fields, embedding width], got " +
                   (in.empty() ? std::string("none") : in[0].to_string()));
    return std::vector<TensorSpec>{{ColumnKind::floats, {1}}};
  }
  std::unique_ptr<CallState> make_state() const override { return std::make_unique<FmState>(); }

  Status forward(Call& c) override {
    auto& s = static_cast<FmState&>(*c.state);
    const Shape out{c.inputs[0].shape[0], 1};
    place(s.y, out);
    backend().fm_forward(c.inputs[0].tensor, s.y);
    c.outputs = {Ref{ColumnKind::floats, s.y, nullptr, out}};
    return {};
  }

  void backward(Call& c) override {
    if (!c.want_dinputs[0]) return;
    auto& s = static_cast<FmState&>(*c.state);
    place(s.dx, c.inputs[0].shape);
    backend().fm_backward(c.inputs[0].tensor, c.doutputs[0], s.dx);
    c.dinputs[0] = s.dx;
  }
};

}  // namespace

Expected<std::unique_ptr<graph::Operation>> make_factorization_machine(LayerConfig& c) {
  // What Keras's base Layer writes into a custom layer's config.
  if (auto st = c.allow_null("activity_regularizer"); !st) return st.error();
  // Casting float inputs to the compute dtype: Troupe's layers compute in float32 anyway.
  if (auto autocast = c.boolean("autocast", true); !autocast) return autocast.error();
  return std::unique_ptr<graph::Operation>(std::make_unique<FactorizationMachine>(c.name()));
}

}  // namespace troupe::core::layers
