// Keras's Dropout: in training, each element is zeroed with probability `rate` and the
// others scaled by 1 / (1 - rate) (inverted dropout); in inference it is the identity (a
// view). The mask is a function of the call's seed for the step (Call::seed) mixed with
// the layer's own `seed` argument when it has one, so two Dropouts of one model, or one
// layer given another seed, drop other elements; the backward pass finds the mask again
// from the same seed (core/kernels/dropout.hpp). Keras's own random stream is not
// reproduced: the masks are Troupe's. noise_shape (a mask broadcast over axes) is refused.

#include <optional>

#include "core/kernels/dropout.hpp"
#include "core/layers/layers.hpp"

namespace troupe::core::layers {

namespace {

struct DropoutState final : CallState {
  Tensor y, dx;
  bool dropped = false;
  uint64_t seed = 0;
};

class Dropout final : public graph::Operation {
 public:
  std::vector<Kernel> kernels() const override { return {Kernel::dropout}; }
  Dropout(std::string name, float rate, std::optional<uint64_t> seed)
      : Operation("Dropout", std::move(name)), rate_(rate), seed_(seed) {}

  Expected<std::vector<TensorSpec>> build(const std::vector<TensorSpec>& in) override {
    if (in.size() != 1 || in[0].kind != ColumnKind::floats) return error("takes one float input");
    return in;
  }

  std::unique_ptr<CallState> make_state() const override {
    return std::make_unique<DropoutState>();
  }
  bool uses_training() const override { return true; }

  Status forward(Call& c) override {
    auto& s = static_cast<DropoutState&>(*c.state);
    const Ref& x = c.inputs[0];
    s.dropped = c.training && rate_ > 0.0f;
    if (!s.dropped) {
      c.outputs = {x};
      return {};
    }
    s.seed = seed_ ? c.seed ^ kernels::mix64(*seed_ + 0x5851f42d4c957f2dULL) : c.seed;
    backend().dropout_forward(x.tensor, place(s.y, x.shape), rate_, s.seed);
    c.outputs = {Ref{ColumnKind::floats, s.y, nullptr, x.shape}};
    return {};
  }

  void backward(Call& c) override {
    auto& s = static_cast<DropoutState&>(*c.state);
    if (!c.want_dinputs[0]) return;
    if (!s.dropped) {
      c.dinputs[0] = c.doutputs[0];
      return;
    }
    backend().dropout_backward(c.doutputs[0], place(s.dx, c.inputs[0].shape), rate_, s.seed);
    c.dinputs[0] = s.dx;
  }

 private:
  float rate_;
  std::optional<uint64_t> seed_;
};

}  // namespace

Expected<std::unique_ptr<graph::Operation>> make_dropout(LayerConfig& c) {
  if (!c.has("rate")) return c.error("rate", "is required");
  auto rate = c.number("rate", 0.0);
  if (!rate) return rate.error();
  if (!(*rate >= 0.0 && *rate <= 1.0)) return c.error("rate", "must be in [0, 1]");
  if (auto st = c.allow_null("noise_shape"); !st) return st.error();
  std::optional<uint64_t> seed;
  if (c.has("seed")) {
    auto s = c.integer("seed");
    if (!s) return s.error();
    seed = static_cast<uint64_t>(*s);
  } else {
    c.raw("seed");
  }
  return std::unique_ptr<graph::Operation>(
      std::make_unique<Dropout>(c.name(), static_cast<float>(*rate), seed));
}

}  // namespace troupe::core::layers
