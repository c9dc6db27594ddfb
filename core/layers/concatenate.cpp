// Keras's Concatenate along any axis but the batch's. Axis a of [outer..., size_i, inner...]
// is the last axis of each input seen as [outer, size_i * inner] rows, so the kernel is one
// column copy per input (its backward, one column take).

#include "core/layers/layers.hpp"

namespace troupe::core::layers {

namespace {

struct ConcatenateState final : CallState {
  Tensor y;
  std::vector<Tensor> dx;
};

class Concatenate final : public graph::Operation {
 public:
  std::vector<Kernel> kernels() const override { return {Kernel::columns}; }
  Concatenate(std::string name, int64_t axis)
      : Operation("Concatenate", std::move(name)), axis_(axis) {}

  Expected<std::vector<TensorSpec>> build(const std::vector<TensorSpec>& in) override {
    if (in.empty()) return error("takes a list of at least one float input");
    const auto rank = static_cast<int64_t>(in[0].shape.size()) + 1;  // with the batch axis
    const int64_t a = axis_ < 0 ? axis_ + rank : axis_;
    if (a < 1 || a >= rank)
      return error("axis " + std::to_string(axis_) + " is not a non-batch axis of " +
                   in[0].to_string());
    const auto p = static_cast<size_t>(a - 1);
    TensorSpec out = in[0];
    out.shape[p] = 0;
    for (const auto& s : in) {
      bool fits = s.kind == ColumnKind::floats && s.shape.size() == in[0].shape.size();
      for (size_t i = 0; fits && i < s.shape.size(); ++i)
        fits = i == p || s.shape[i] == in[0].shape[i];
      if (!fits)
        return error("takes float inputs whose shapes match except on axis " +
                     std::to_string(axis_) + ", got " + list(in));
      out.shape[p] += s.shape[p];
    }
    return std::vector<TensorSpec>{out};
  }

  std::unique_ptr<CallState> make_state() const override {
    return std::make_unique<ConcatenateState>();
  }

  Status forward(Call& c) override {
    auto& s = static_cast<ConcatenateState&>(*c.state);
    const Shape out_shape = output_shape(c);
    TensorView y = place(s.y, out_shape);
    const TensorView rows = y.reshaped(matrix(out_shape));
    int64_t offset = 0;
    for (const Ref& x : c.inputs) {
      const Shape m = matrix(x.shape);
      backend().copy_columns(x.tensor.reshaped(m), rows, offset, false);
      offset += m[1];
    }
    c.outputs = {Ref{ColumnKind::floats, y, nullptr, out_shape}};
    return {};
  }

  void backward(Call& c) override {
    auto& s = static_cast<ConcatenateState&>(*c.state);
    const Shape out_shape = output_shape(c);
    const ConstTensorView rows = c.doutputs[0].reshaped(matrix(out_shape));
    s.dx.resize(c.inputs.size());
    int64_t offset = 0;
    for (size_t i = 0; i < c.inputs.size(); ++i) {
      const Shape m = matrix(c.inputs[i].shape);
      if (c.want_dinputs[i]) {
        TensorView dx = place(s.dx[i], c.inputs[i].shape);
        backend().take_columns(rows, offset, dx.reshaped(m));
        c.dinputs[i] = dx;
      }
      offset += m[1];
    }
  }

 private:
  // The concatenation axis in a full shape (batch included).
  int axis_in(const Shape& s) const {
    return static_cast<int>(axis_ < 0 ? axis_ + s.rank() : axis_);
  }
  // [outer, size * inner] around the concatenation axis.
  Shape matrix(const Shape& s) const {
    const int a = axis_in(s);
    int64_t outer = 1, cols = 1;
    for (int i = 0; i < s.rank(); ++i)
      (i < a ? outer : cols) *= s[i];
    return Shape{outer, cols};
  }
  Shape output_shape(const Call& c) const {
    Shape out = c.inputs[0].shape;
    const int a = axis_in(out);
    out[a] = 0;
    for (const Ref& x : c.inputs)
      out[a] += x.shape[a];
    return out;
  }
  static std::string list(const std::vector<TensorSpec>& in) {
    std::string s;
    for (const auto& t : in)
      s += (s.empty() ? "" : ", ") + t.to_string();
    return s;
  }

  int64_t axis_;
};

}  // namespace

Expected<std::unique_ptr<graph::Operation>> make_concatenate(LayerConfig& c) {
  auto axis = c.integer("axis", -1);
  if (!axis) return axis.error();
  return std::unique_ptr<graph::Operation>(std::make_unique<Concatenate>(c.name(), *axis));
}

}  // namespace troupe::core::layers
