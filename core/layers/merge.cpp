// Keras's element-wise merges of inputs of one shape: Add, Subtract (exactly two inputs),
// Multiply and Average. Keras would broadcast inputs of other shapes; Troupe takes equal
// shapes, and for Multiply of two inputs the one broadcast a weighted-feature model needs:
// [..., k] times [..., 1] (each row of k values scaled by its own weight, e.g. embeddings
// [batch, fields, dim] by per-id values [batch, fields, 1]), in either order. Any other
// shapes name the layer. (Maximum and Minimum: merge_extremum.cpp.)

#include "core/layers/layers.hpp"

namespace troupe::core::layers {

namespace {

enum class MergeOp { add, subtract, multiply, average };

const char* class_of(MergeOp op) {
  switch (op) {
    case MergeOp::add:
      return "Add";
    case MergeOp::subtract:
      return "Subtract";
    case MergeOp::multiply:
      return "Multiply";
    case MergeOp::average:
      return "Average";
  }
  return "?";
}

struct MergeState final : CallState {
  Tensor y;
  std::vector<Tensor> dx;
};

// Whether `w` is `x` with its last dimension 1 (the weights of x's rows), x's last > 1.
bool row_weights(const Shape& x, const Shape& w) {
  const int r = x.rank();
  if (w.rank() != r || r == 0 || x[r - 1] <= 1 || w[r - 1] != 1) return false;
  for (int i = 0; i + 1 < r; ++i)
    if (x[i] != w[i]) return false;
  return true;
}

// For a Multiply of two inputs, the index of the [..., k] one whose rows the other
// [..., 1] weights, or -1. Decided per call: a shared layer may be called both ways.
int weighted_input(const Shape& a, const Shape& b) {
  if (row_weights(a, b)) return 0;
  if (row_weights(b, a)) return 1;
  return -1;
}

class Merge final : public graph::Operation {
 public:
  std::vector<Kernel> kernels() const override {
    return {Kernel::axpby, Kernel::multiply, Kernel::row_dot, Kernel::scale_rows};
  }
  Merge(std::string name, MergeOp op) : Operation(class_of(op), std::move(name)), op_(op) {}

  Expected<std::vector<TensorSpec>> build(const std::vector<TensorSpec>& in) override {
    if (op_ == MergeOp::subtract ? in.size() != 2 : in.empty())
      return error(op_ == MergeOp::subtract ? "takes exactly two inputs"
                                            : "takes a list of at least one input");
    if (op_ == MergeOp::multiply && in.size() == 2 && in[0].kind == ColumnKind::floats &&
        in[1].kind == ColumnKind::floats && in[0].shape.size() < Shape::max_rank &&
        in[1].shape.size() < Shape::max_rank) {
      const int x = weighted_input(Shape(in[0].shape), Shape(in[1].shape));
      if (x >= 0) return std::vector<TensorSpec>{in[static_cast<size_t>(x)]};
    }
    if (auto st = same_float_inputs(*this, in); !st) return st.error();
    return std::vector<TensorSpec>{in[0]};
  }

  std::unique_ptr<CallState> make_state() const override { return std::make_unique<MergeState>(); }

  Status forward(Call& c) override {
    auto& s = static_cast<MergeState&>(*c.state);
    const int weighted = op_ == MergeOp::multiply && c.inputs.size() == 2
                             ? weighted_input(c.inputs[0].shape, c.inputs[1].shape)
                             : -1;
    if (weighted >= 0) {  // x [rows, k] scaled row by row by w [rows]
      const auto& x = c.inputs[static_cast<size_t>(weighted)];
      const auto& w = c.inputs[static_cast<size_t>(1 - weighted)];
      const int64_t k = x.shape[x.shape.rank() - 1];
      TensorView y = place(s.y, x.shape);
      backend().scale_rows(x.tensor.reshaped(Shape{x.shape.num_elements() / k, k}),
                           w.tensor.reshaped(Shape{w.shape.num_elements()}),
                           y.reshaped(Shape{x.shape.num_elements() / k, k}), false);
      c.outputs = {Ref{ColumnKind::floats, y, nullptr, x.shape}};
      return {};
    }
    const Shape& shape = c.inputs[0].shape;
    TensorView y = place(s.y, shape);
    const auto n = c.inputs.size();
    if (op_ == MergeOp::multiply) {
      if (n == 1) backend().axpby(1.0f, c.inputs[0].tensor, 0.0f, y);
      for (size_t i = 1; i < n; ++i)
        backend().multiply(i == 1 ? c.inputs[0].tensor : ConstTensorView(y), c.inputs[i].tensor, y,
                           false);
    } else {
      // Keras sums in input order ((x0 + x1) + x2 ...), then Average divides.
      size_t i = 1;
      if (op_ != MergeOp::subtract && n > 1) {
        backend().add_into(c.inputs[0].tensor, c.inputs[1].tensor, y);
        i = 2;
      } else {
        backend().axpby(1.0f, c.inputs[0].tensor, 0.0f, y);
      }
      for (; i < n; ++i)
        backend().axpby(op_ == MergeOp::subtract ? -1.0f : 1.0f, c.inputs[i].tensor, 1.0f, y);
      if (op_ == MergeOp::average && n > 1)
        backend().axpby(1.0f / static_cast<float>(n), y, 0.0f, y);
    }
    c.outputs = {Ref{ColumnKind::floats, y, nullptr, shape}};
    return {};
  }

  void backward(Call& c) override {
    auto& s = static_cast<MergeState&>(*c.state);
    const ConstTensorView dy = c.doutputs[0];
    const size_t n = c.inputs.size();
    s.dx.resize(n);
    const int weighted = op_ == MergeOp::multiply && n == 2
                             ? weighted_input(c.inputs[0].shape, c.inputs[1].shape)
                             : -1;
    if (weighted >= 0) {  // dx = dy scaled by w; dw [r] = dy [r, :] . x [r, :]
      const size_t xi = static_cast<size_t>(weighted), wi = 1 - xi;
      const auto& x = c.inputs[xi];
      const auto& w = c.inputs[wi];
      const int64_t k = x.shape[x.shape.rank() - 1];
      const Shape rows{x.shape.num_elements() / k, k};
      if (c.want_dinputs[xi]) {
        TensorView d = place(s.dx[xi], x.shape);
        backend().scale_rows(dy.reshaped(rows), w.tensor.reshaped(Shape{rows[0]}), d.reshaped(rows),
                             false);
        c.dinputs[xi] = d;
      }
      if (c.want_dinputs[wi]) {
        TensorView d = place(s.dx[wi], w.shape);
        backend().row_dot(dy.reshaped(rows), x.tensor.reshaped(rows), d.reshaped(Shape{rows[0]}));
        c.dinputs[wi] = d;
      }
      return;
    }
    switch (op_) {
      case MergeOp::add:
        for (size_t i = 0; i < n; ++i)
          if (c.want_dinputs[i]) c.dinputs[i] = dy;
        break;
      case MergeOp::subtract:
        if (c.want_dinputs[0]) c.dinputs[0] = dy;
        if (c.want_dinputs[1]) {
          backend().axpby(-1.0f, dy, 0.0f, place(s.dx[1], dy.shape()));
          c.dinputs[1] = s.dx[1];
        }
        break;
      case MergeOp::average: {
        // Every input's gradient is dy / n: one buffer for all.
        TensorView d = place(s.dx[0], dy.shape());
        backend().axpby(1.0f / static_cast<float>(n), dy, 0.0f, d);
        for (size_t i = 0; i < n; ++i)
          if (c.want_dinputs[i]) c.dinputs[i] = d;
        break;
      }
      case MergeOp::multiply:
        // d/dx_i = dy times the product of the other inputs.
        for (size_t i = 0; i < n; ++i) {
          if (!c.want_dinputs[i]) continue;
          TensorView d = place(s.dx[i], dy.shape());
          if (n == 1) backend().axpby(1.0f, dy, 0.0f, d);
          bool first = true;
          for (size_t j = 0; j < n; ++j) {
            if (j == i) continue;
            backend().multiply(first ? dy : ConstTensorView(d), c.inputs[j].tensor, d, false);
            first = false;
          }
          c.dinputs[i] = d;
        }
        break;
    }
  }

 private:
  MergeOp op_;
};

Expected<std::unique_ptr<graph::Operation>> make_merge(LayerConfig& c, MergeOp op) {
  return std::unique_ptr<graph::Operation>(std::make_unique<Merge>(c.name(), op));
}

}  // namespace

Status same_float_inputs(const graph::Operation& layer, const std::vector<TensorSpec>& in) {
  for (const auto& s : in)
    if (s.kind != ColumnKind::floats || s != in[0]) {
      std::string got;
      for (const auto& t : in)
        got += (got.empty() ? "" : ", ") + t.to_string();
      return layer.error(
          "takes float inputs of one shape (Troupe broadcasts only Multiply's two inputs "
          "[..., k] and [..., 1]), got " +
          got);
    }
  return {};
}

Expected<std::unique_ptr<graph::Operation>> make_add(LayerConfig& c) {
  return make_merge(c, MergeOp::add);
}
Expected<std::unique_ptr<graph::Operation>> make_subtract(LayerConfig& c) {
  return make_merge(c, MergeOp::subtract);
}
Expected<std::unique_ptr<graph::Operation>> make_multiply(LayerConfig& c) {
  return make_merge(c, MergeOp::multiply);
}
Expected<std::unique_ptr<graph::Operation>> make_average(LayerConfig& c) {
  return make_merge(c, MergeOp::average);
}

}  // namespace troupe::core::layers
