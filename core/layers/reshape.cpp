// Keras's Reshape: each example's values in another shape (target_shape, one entry of which
// may be -1: whatever the others leave). Row-major in both, so the output is a view of the
// input and its gradient a view of the output's.

#include "core/layers/layers.hpp"

namespace troupe::core::layers {

namespace {

class Reshape final : public graph::Operation {
 public:
  std::vector<Kernel> kernels() const override { return {}; }
  Reshape(std::string name, std::vector<int64_t> target)
      : Operation("Reshape", std::move(name)), target_(std::move(target)) {}

  Expected<std::vector<TensorSpec>> build(const std::vector<TensorSpec>& in) override {
    if (in.size() != 1 || in[0].kind != ColumnKind::floats) return error("takes one float input");
    const int64_t total = in[0].per_example();
    int64_t known = 1;
    int free_axis = -1;
    for (size_t i = 0; i < target_.size(); ++i)
      if (target_[i] == -1)
        free_axis = static_cast<int>(i);
      else
        known *= target_[i];
    std::vector<int64_t> shape = target_;
    if (free_axis >= 0 && known > 0 && total % known == 0)
      shape[static_cast<size_t>(free_axis)] = total / known;
    TensorSpec out{ColumnKind::floats, shape};
    if (out.per_example() != total || (free_axis >= 0 && known == 0))
      return error("cannot reshape " + in[0].to_string() + " (" + std::to_string(total) +
                   " values per example) to target_shape " + spec_text());
    return std::vector<TensorSpec>{out};
  }

  Status forward(Call& c) override {
    const Ref& x = c.inputs[0];
    std::vector<int64_t> dims{x.batch()};
    const int64_t per = x.batch() == 0 ? 0 : x.tensor.size() / x.batch();
    int64_t known = 1;
    for (int64_t d : target_)
      if (d != -1) known *= d;
    for (int64_t d : target_)
      dims.push_back(d == -1 ? (known == 0 ? 0 : per / known) : d);
    const Shape out(dims);
    c.outputs = {Ref{ColumnKind::floats, x.tensor.reshaped(out), nullptr, out}};
    return {};
  }

  void backward(Call& c) override {
    if (c.want_dinputs[0]) c.dinputs[0] = c.doutputs[0].reshaped(c.inputs[0].shape);
  }

 private:
  std::string spec_text() const {
    std::string s = "(";
    for (size_t i = 0; i < target_.size(); ++i)
      s += (i == 0 ? "" : ", ") + std::to_string(target_[i]);
    return s + ")";
  }

  std::vector<int64_t> target_;
};

}  // namespace

Expected<std::unique_ptr<graph::Operation>> make_reshape(LayerConfig& c) {
  auto target = c.integers("target_shape", 0);
  if (!target) return target.error();
  if (target->size() + 1 > static_cast<size_t>(Shape::max_rank))
    return c.error("target_shape", "Troupe's tensors have at most " +
                                       std::to_string(Shape::max_rank) + " axes, batch included");
  int free = 0;
  for (int64_t d : *target) {
    if (d == -1) ++free;
    if (d < -1 || d == 0) return c.error("target_shape", "must hold positive sizes or one -1");
  }
  if (free > 1) return c.error("target_shape", "may hold -1 only once");
  return std::unique_ptr<graph::Operation>(std::make_unique<Reshape>(c.name(), std::move(*target)));
}

}  // namespace troupe::core::layers
