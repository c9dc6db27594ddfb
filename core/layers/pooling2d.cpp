// Keras's MaxPooling2D and AveragePooling2D, channels_last: x [batch, h, w, c] ->
// [batch, oh, ow, c], each output the largest or the mean of its pool_size window, moved
// by strides (Keras's default: the pool size), padding "valid" or "same" (TensorFlow's:
// the odd one out at the bottom and right; the padding is never read, and a mean divides
// by the window's elements inside the input). One layer, two kinds.

#include "core/layers/layers.hpp"

namespace troupe::core::layers {

namespace {

struct Pool2dState final : CallState {
  Tensor y, dx;
};

class Pooling2D final : public graph::Operation {
 public:
  std::vector<Kernel> kernels() const override { return {Kernel::pool2d}; }
  Pooling2D(const char* class_name, std::string name, PoolKind kind, std::vector<int64_t> pool,
            std::vector<int64_t> strides, bool same)
      : Operation(class_name, std::move(name)),
        kind_(kind),
        pool_(std::move(pool)),
        strides_(std::move(strides)),
        same_(same) {}

  Expected<std::vector<TensorSpec>> build(const std::vector<TensorSpec>& in) override {
    if (in.size() != 1 || in[0].kind != ColumnKind::floats || in[0].shape.size() != 3)
      return error("takes one float input [height, width, channels], got " +
                   (in.empty() ? std::string("none") : in[0].to_string()));
    const int64_t h = in[0].shape[0], w = in[0].shape[1];
    const int64_t oh = window_output_size(h, pool_[0], strides_[0], same_);
    const int64_t ow = window_output_size(w, pool_[1], strides_[1], same_);
    if (oh <= 0 || ow <= 0)
      return error("its pool (" + std::to_string(pool_[0]) + " x " + std::to_string(pool_[1]) +
                   ") does not fit in " + in[0].to_string());
    return std::vector<TensorSpec>{{ColumnKind::floats, {oh, ow, in[0].shape[2]}}};
  }
  std::unique_ptr<CallState> make_state() const override { return std::make_unique<Pool2dState>(); }

  Status forward(Call& c) override {
    auto& s = static_cast<Pool2dState&>(*c.state);
    const Shape& xs = c.inputs[0].shape;
    const Pool2dGeometry g = geometry(xs[1], xs[2]);
    const Shape ys{xs[0], window_output_size(xs[1], g.pool_h, g.stride_h, same_),
                   window_output_size(xs[2], g.pool_w, g.stride_w, same_), xs[3]};
    place(s.y, ys);
    backend().pool2d_forward(kind_, g, c.inputs[0].tensor, s.y);
    c.outputs = {Ref{ColumnKind::floats, s.y, nullptr, ys}};
    return {};
  }

  void backward(Call& c) override {
    if (!c.want_dinputs[0]) return;
    auto& s = static_cast<Pool2dState&>(*c.state);
    const Shape& xs = c.inputs[0].shape;
    place(s.dx, xs);
    backend().pool2d_backward(kind_, geometry(xs[1], xs[2]), c.inputs[0].tensor, s.y, c.doutputs[0],
                              s.dx);
    c.dinputs[0] = s.dx;
  }

 private:
  Pool2dGeometry geometry(int64_t h, int64_t w) const {
    Pool2dGeometry g;
    g.pool_h = pool_[0];
    g.pool_w = pool_[1];
    g.stride_h = strides_[0];
    g.stride_w = strides_[1];
    if (same_) {
      same_padding(h, g.pool_h, g.stride_h, g.pad_top, g.pad_bottom);
      same_padding(w, g.pool_w, g.stride_w, g.pad_left, g.pad_right);
    }
    return g;
  }

  PoolKind kind_;
  std::vector<int64_t> pool_, strides_;
  bool same_;
};

Expected<std::unique_ptr<graph::Operation>> make_pooling2d(LayerConfig& c, const char* class_name,
                                                           PoolKind kind) {
  auto pool = c.integers("pool_size", 2, {2, 2});
  if (!pool) return pool.error();
  if ((*pool)[0] <= 0 || (*pool)[1] <= 0) return c.error("pool_size", "must be positive");
  auto strides = c.integers("strides", 2, *pool);  // null: the pool size
  if (!strides) return strides.error();
  if ((*strides)[0] <= 0 || (*strides)[1] <= 0) return c.error("strides", "must be positive");
  auto padding = c.string("padding", "valid");
  if (!padding) return padding.error();
  if (*padding != "valid" && *padding != "same")
    return c.error("padding", "Troupe supports \"valid\" and \"same\"");
  if (auto st = c.allow("data_format", {"channels_last"}); !st) return st.error();
  return std::unique_ptr<graph::Operation>(std::make_unique<Pooling2D>(
      class_name, c.name(), kind, std::move(*pool), std::move(*strides), *padding == "same"));
}

}  // namespace

Expected<std::unique_ptr<graph::Operation>> make_max_pooling2d(LayerConfig& c) {
  return make_pooling2d(c, "MaxPooling2D", PoolKind::max);
}

Expected<std::unique_ptr<graph::Operation>> make_average_pooling2d(LayerConfig& c) {
  return make_pooling2d(c, "AveragePooling2D", PoolKind::average);
}

}  // namespace troupe::core::layers
