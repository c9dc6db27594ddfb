// Keras's cast and one_hot. Troupe's tensors are float32 on the model's device, or integer
// ids and strings on the host: a cast between float types is the tensor itself, a cast of
// ids to a float type copies their values to the device, a cast between integer types is
// the ids themselves. one_hot of ids builds the rows on the host and copies them over; of
// a float tensor of class indices (argmax's), it compares with the class numbers on the
// device. Neither passes a gradient to integer inputs.

#include "core/ops/op.hpp"

namespace troupe::core::ops {

namespace {

bool float_type(const std::string& t) {
  return t == "float32" || t == "float16" || t == "bfloat16" || t == "float64";
}
bool int_type(const std::string& t) {
  return t == "int32" || t == "int64" || t == "int16" || t == "int8" || t == "uint8" ||
         t == "uint16" || t == "uint32" || t == "bool";
}

struct CastState final : CallState {
  Tensor host, y;
};

class Cast final : public Op {
 public:
  Cast(std::string name, bool to_float) : Op("Cast", std::move(name)), to_float_(to_float) {}

  std::vector<Kernel> kernels() const override { return {}; }
  bool on_host() const override { return host_; }
  bool differentiable() const override { return from_ == ColumnKind::floats; }
  std::unique_ptr<CallState> make_state() const override { return std::make_unique<CastState>(); }

  Expected<std::vector<TensorSpec>> build(const std::vector<TensorSpec>& in) override {
    if (in.size() != 1) return error("takes one tensor");
    from_ = in[0].kind;
    if (from_ == ColumnKind::strings) return error("cannot cast strings (use a lookup layer)");
    if (from_ == ColumnKind::floats && !to_float_)
      return error(
          "casts a float tensor to integers: Troupe's integer ids come from the "
          "model's inputs and lookup layers, on the host");
    host_ = from_ == ColumnKind::ints && !to_float_;
    TensorSpec out = in[0];
    out.kind = to_float_ ? ColumnKind::floats : ColumnKind::ints;
    return std::vector<TensorSpec>{out};
  }

  Status forward(Call& c) override {
    const Ref& x = c.inputs[0];
    if (from_ == ColumnKind::floats || host_) {  // the tensor itself
      c.outputs = {x};
      return {};
    }
    auto& s = static_cast<CastState&>(*c.state);
    if (s.host.shape() != x.shape) s.host = Tensor(x.shape);
    const int64_t* ids = x.ints();
    for (int64_t i = 0; i < x.tensor.size(); ++i)
      s.host[i] = static_cast<float>(ids[i]);
    const ConstTensorView y = on(device(), s.host, s.y);
    c.outputs = {Ref{ColumnKind::floats, y, nullptr, x.shape}};
    return {};
  }

  void backward(Call& c) override { c.dinputs[0] = c.doutputs[0]; }

 private:
  bool to_float_;
  ColumnKind from_ = ColumnKind::floats;
  bool host_ = false;
};

struct OneHotState final : CallState {
  Tensor host, y, classes;
};

class OneHot final : public Op {
 public:
  OneHot(std::string name, int64_t classes) : Op("OneHot", std::move(name)), classes_(classes) {}

  std::vector<Kernel> kernels() const override { return {Kernel::elementwise}; }
  bool differentiable() const override { return false; }
  std::unique_ptr<CallState> make_state() const override { return std::make_unique<OneHotState>(); }

  Expected<std::vector<TensorSpec>> build(const std::vector<TensorSpec>& in) override {
    if (in.size() != 1 || in[0].kind == ColumnKind::strings)
      return error("takes one tensor of class indices");
    from_ = in[0].kind;
    TensorSpec out = in[0];
    out.kind = ColumnKind::floats;
    out.shape.push_back(classes_);
    return std::vector<TensorSpec>{out};
  }

  Status forward(Call& c) override {
    auto& s = static_cast<OneHotState&>(*c.state);
    const Ref& x = c.inputs[0];
    std::vector<int64_t> dims = x.shape.to_vector();
    dims.push_back(classes_);
    const Shape ys(dims);
    if (from_ == ColumnKind::ints) {
      // Out-of-range ids give a row of zeros, as Keras's one_hot does.
      if (s.host.shape() != ys) s.host = Tensor(ys);
      s.host.fill(0.0f);
      const int64_t* ids = x.ints();
      for (int64_t i = 0; i < x.tensor.size(); ++i)
        if (ids[i] >= 0 && ids[i] < classes_) s.host[i * classes_ + ids[i]] = 1.0f;
      c.outputs = {Ref{ColumnKind::floats, on(device(), s.host, s.y), nullptr, ys}};
      return {};
    }
    // Float class indices: equal(x[..., None], [0, 1, .., classes - 1]).
    if (s.classes.size() != classes_ || s.classes.device() != device()) {
      Tensor k(Shape{classes_});
      for (int64_t i = 0; i < classes_; ++i)
        k[i] = static_cast<float>(i);
      s.classes = device().is_cpu() ? k : k.to(device());
    }
    std::vector<int64_t> xd = x.shape.to_vector();
    xd.push_back(1);
    backend().elementwise(ElementOp::equal, {x.tensor.reshaped(Shape(xd)), s.classes},
                          place(s.y, ys));
    c.outputs = {Ref{ColumnKind::floats, s.y, nullptr, ys}};
    return {};
  }

  void backward(Call&) override {}

 private:
  int64_t classes_;
  ColumnKind from_ = ColumnKind::ints;
};

}  // namespace

Expected<std::unique_ptr<graph::Operation>> make_cast(OpConfig& c) {
  const Arg* x = c.arg(0, "x");
  if (x == nullptr || x->kind != Arg::Kind::tensor) return c.arg_error("x", "must be a tensor");
  auto dtype = c.string("dtype", "");
  if (!dtype) return dtype.error();
  if (!float_type(*dtype) && !int_type(*dtype))
    return c.error("dtype", "is not a type Troupe computes in");
  if (auto st = c.finish_call(); !st) return st.error();
  return std::unique_ptr<graph::Operation>(std::make_unique<Cast>(c.name(), float_type(*dtype)));
}

Expected<std::unique_ptr<graph::Operation>> make_one_hot(OpConfig& c) {
  const Arg* x = c.arg(0, "x");
  if (x == nullptr || x->kind != Arg::Kind::tensor) return c.arg_error("x", "must be a tensor");
  auto classes = c.integer("num_classes");
  if (!classes) return classes.error();
  if (*classes <= 0) return c.error("num_classes", "must be positive");
  if (auto st = c.allow("axis", {-1}); !st) return st.error();
  if (auto st = c.allow("sparse", {false}); !st) return st.error();
  auto dtype = c.string("dtype", "float32");
  if (!dtype) return dtype.error();
  if (!float_type(*dtype)) return c.error("dtype", "must be a float type");
  if (auto st = c.finish_call(); !st) return st.error();
  return std::unique_ptr<graph::Operation>(std::make_unique<OneHot>(c.name(), *classes));
}

}  // namespace troupe::core::ops
