#include "core/ops/op.hpp"

#include <algorithm>

#include "core/kernels/plan.hpp"

namespace troupe::core::ops {

using nlohmann::json;

Dims batched(const TensorSpec& s) {
  Dims d{kBatch};
  d.insert(d.end(), s.shape.begin(), s.shape.end());
  return d;
}

std::string dims_text(const Dims& d) {
  std::string out = "(";
  for (size_t i = 0; i < d.size(); ++i)
    out += (i == 0 ? "" : ", ") + (d[i] == kBatch ? std::string("None") : std::to_string(d[i]));
  return out + (d.size() == 1 ? ",)" : ")");
}

Expected<Arg> parse_arg(const json& v, std::vector<json>& tensors) {
  Arg a;
  if (v.is_null()) return a;
  if (v.is_array()) {
    a.kind = Arg::Kind::list;
    for (const auto& e : v) {
      auto item = parse_arg(e, tensors);
      if (!item) return item;
      a.items.push_back(std::move(*item));
    }
    return a;
  }
  if (v.is_number() || v.is_boolean()) {
    a.kind = Arg::Kind::constant;
    a.value = v;
    return a;
  }
  if (!v.is_object())
    return make_error(Errc::invalid_argument, "a call argument " + v.dump() + " is not supported");
  const std::string cls = v.value("class_name", "");
  const json& config = graph::member(v, "config");
  if (cls == "__keras_tensor__") {
    a.kind = Arg::Kind::tensor;
    a.tensor = static_cast<int>(tensors.size());
    tensors.push_back(graph::member(config, "keras_history"));
    return a;
  }
  if (cls == "__numpy__" || cls == "__tensor__") {
    a.kind = Arg::Kind::constant;
    a.value = config;
    return a;
  }
  if (cls == "__slice__") {
    a.kind = Arg::Kind::slice;
    a.value = config;
    return a;
  }
  if (cls == "__ellipsis__") {
    a.kind = Arg::Kind::ellipsis;
    return a;
  }
  return make_error(Errc::invalid_argument,
                    "a call argument of class '" + cls + "' is not supported");
}

namespace {

// The shape of a nested list of numbers, or false where it is ragged or holds other values.
bool nested_shape(const json& v, std::vector<int64_t>& dims, size_t depth = 0) {
  if (!v.is_array()) {
    if (depth != dims.size()) return false;
    return v.is_number() || v.is_boolean();
  }
  if (depth == dims.size()) {
    if (dims.size() >= static_cast<size_t>(Shape::max_rank)) return false;
    dims.push_back(static_cast<int64_t>(v.size()));
  } else if (depth > dims.size() || dims[depth] != static_cast<int64_t>(v.size())) {
    return false;
  }
  for (const auto& e : v)
    if (!nested_shape(e, dims, depth + 1)) return false;
  return true;
}

void flatten(const json& v, std::vector<float>& out) {
  if (!v.is_array()) {
    out.push_back(v.is_boolean() ? (v.get<bool>() ? 1.0f : 0.0f) : to_float(v.get<double>()));
    return;
  }
  for (const auto& e : v)
    flatten(e, out);
}

}  // namespace

Expected<Tensor> constant_tensor(const Arg& a, const std::string& what) {
  if (a.kind != Arg::Kind::constant)
    return make_error(Errc::invalid_argument, what + " must be a number or an array");
  const json& v = a.value.is_object() ? graph::member(a.value, "value") : a.value;
  std::vector<int64_t> dims;
  if (!nested_shape(v, dims))
    return make_error(Errc::invalid_argument,
                      what + " is an array Troupe cannot read (ragged, of more than " +
                          std::to_string(Shape::max_rank) + " axes, or not numbers)");
  if (!graph::fits_elements(dims, graph::kMaxWeightElements))
    return make_error(Errc::invalid_argument, what + " is an array over Troupe's size limit");
  if (a.value.is_object()) {
    const std::string dtype = a.value.value("dtype", "float32");
    if (dtype == "string" || dtype.rfind("complex", 0) == 0)
      return make_error(Errc::invalid_argument,
                        what + " is an array of " + dtype + ", which Troupe does not compute on");
  }
  std::vector<float> values;
  flatten(v, values);
  return Tensor(Shape(dims), std::move(values));
}

OpConfig::OpConfig(std::string class_name, const json& config, std::vector<Arg> args,
                   std::map<std::string, Arg> kwargs)
    : ConfigArgs("", config),
      class_name_(std::move(class_name)),
      args_(std::move(args)),
      kwargs_(std::move(kwargs)) {
  if (config.is_object() && config.contains("name") && config["name"].is_string())
    name_ = config["name"].get<std::string>();
  ignore("name");
  set_context("operation '" + name_ + "' (" + class_name_ + ")");
}

const Arg* OpConfig::arg(size_t index, const std::string& key) {
  if (index < args_.size()) return &args_[index];
  auto it = kwargs_.find(key);
  if (it == kwargs_.end()) return nullptr;
  read_kwargs_.push_back(key);
  return &it->second;
}

Status OpConfig::finish_call() const {
  for (const auto& [k, v] : kwargs_)
    if (std::find(read_kwargs_.begin(), read_kwargs_.end(), k) == read_kwargs_.end())
      return arg_error(k, "is not an argument Troupe reads for this operation");
  return finish();
}

Error OpConfig::arg_error(const std::string& arg, const std::string& what) const {
  return make_error(Errc::invalid_argument, "operation '" + name_ + "' (" + class_name_ +
                                                "): argument '" + arg + "' " + what);
}

Expected<Operand> Operand::from(const Arg& a, const OpConfig& c, const std::string& what) {
  Operand o;
  if (a.kind == Arg::Kind::tensor) {
    o.input = a.tensor;
    return o;
  }
  auto t = constant_tensor(a, "operation '" + c.name() + "' (" + c.class_name() + "): " + what);
  if (!t) return t.error();
  o.constant = std::move(*t);
  return o;
}

Expected<int> Op::axis(int64_t axis, int rank, const std::string& what) const {
  const int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= rank)
    return error(what + " " + std::to_string(axis) + " is outside a tensor of " +
                 std::to_string(rank) + " axes");
  if (a == 0)
    return error(what + " " + std::to_string(axis) +
                 " is the batch axis: Troupe keeps the examples of a batch apart");
  return static_cast<int>(a);
}

ConstTensorView Op::value(const Operand& o, size_t k, const Call& c) {
  if (o.is_tensor()) return c.inputs[static_cast<size_t>(o.input)].tensor;
  if (device().is_cpu()) return o.constant;
  auto& placed = static_cast<OperandState&>(*c.state).constants;
  if (placed.size() <= k) placed.resize(k + 1);
  if (placed[k].data() == nullptr || placed[k].device() != device())
    placed[k] = o.constant.to(device());
  return placed[k];
}

Dims Op::dims(const Operand& o, const std::vector<TensorSpec>& in) {
  if (o.is_tensor()) return batched(in[static_cast<size_t>(o.input)]);
  return o.constant.shape().to_vector();
}

void Op::transpose(ConstTensorView x, const std::vector<int>& perm, Tensor& out) {
  std::vector<int64_t> dims;
  for (int p : perm)
    dims.push_back(x.shape()[p]);
  backend().copy_strided(kernels::plan_transpose(x.shape(), perm), x, place(out, Shape(dims)),
                         false);
}

void Op::broadcast(ConstTensorView x, const Shape& to, Tensor& out) {
  std::vector<int64_t> strides(static_cast<size_t>(to.rank()), 0);
  const auto xs = kernels::strides_of(x.shape());
  for (int d = 0; d < x.shape().rank(); ++d) {
    const int td = to.rank() - x.shape().rank() + d;
    strides[static_cast<size_t>(td)] = x.shape()[d] == 1 ? 0 : xs[static_cast<size_t>(d)];
  }
  backend().copy_strided(kernels::plan_copy(to.to_vector(), 0, strides, 0, kernels::strides_of(to)),
                         x, place(out, to), false);
}

std::vector<int> Op::inverse(const std::vector<int>& perm) {
  std::vector<int> q(perm.size());
  for (size_t i = 0; i < perm.size(); ++i)
    q[static_cast<size_t>(perm[i])] = static_cast<int>(i);
  return q;
}

namespace {

struct PermutationState final : CallState {
  Tensor y, dx;
};

}  // namespace

std::unique_ptr<CallState> Permutation::make_state() const {
  return std::make_unique<PermutationState>();
}

Expected<std::vector<TensorSpec>> Permutation::build(const std::vector<TensorSpec>& in) {
  if (in.size() != 1 || in[0].kind != ColumnKind::floats) return error("takes one float tensor");
  const Dims x = batched(in[0]);
  auto perm = permutation(x);
  if (!perm) return perm.error();
  std::vector<bool> seen(x.size(), false);
  for (int p : *perm) {
    if (p < 0 || p >= static_cast<int>(x.size()) || seen[static_cast<size_t>(p)])
      return error("permutes the axes of " + dims_text(x) + " with repeats or gaps");
    seen[static_cast<size_t>(p)] = true;
  }
  if (perm->size() != x.size()) return error("permutes " + dims_text(x) + " with another rank");
  if ((*perm)[0] != 0) return error("moves the batch axis: Troupe keeps it first");
  perm_ = *perm;
  Dims out;
  for (int p : perm_)
    out.push_back(x[static_cast<size_t>(p)]);
  auto spec = unbatched(*this, out, ColumnKind::floats);
  if (!spec) return spec.error();
  return std::vector<TensorSpec>{*spec};
}

Status Permutation::forward(Call& c) {
  auto& s = static_cast<PermutationState&>(*c.state);
  transpose(c.inputs[0].tensor, perm_, s.y);
  c.outputs = {Ref{ColumnKind::floats, s.y, nullptr, s.y.shape()}};
  return {};
}

void Permutation::backward(Call& c) {
  auto& s = static_cast<PermutationState&>(*c.state);
  transpose(c.doutputs[0], inverse(perm_), s.dx);
  c.dinputs[0] = s.dx;
}

Expected<Dims> broadcast_dims(const graph::Operation& op, const std::vector<Dims>& shapes) {
  size_t rank = 0;
  for (const auto& s : shapes)
    rank = std::max(rank, s.size());
  Dims out(rank, 1);
  for (const auto& s : shapes)
    for (size_t i = 0; i < s.size(); ++i) {
      const size_t a = rank - s.size() + i;
      const int64_t d = s[i];
      if (d == out[a] || d == 1) continue;
      if (out[a] != 1) {
        std::string all;
        for (const auto& t : shapes)
          all += (all.empty() ? "" : " and ") + dims_text(t);
        const bool batch = d == kBatch || out[a] == kBatch;
        return op.error("cannot broadcast " + all +
                        (batch ? ": the batch axis of one meets a fixed size of the other "
                                 "(Troupe keeps the examples of a batch apart)"
                               : ""));
      }
      out[a] = d;
    }
  if (out.empty() || out[0] != kBatch)
    return op.error("would broadcast over the batch axis (its operands are " + [&] {
      std::string all;
      for (const auto& t : shapes)
        all += (all.empty() ? "" : ", ") + dims_text(t);
      return all;
    }() + "): Troupe keeps the examples of a batch apart");
  return out;
}

Expected<TensorSpec> unbatched(const graph::Operation& op, const Dims& d, ColumnKind kind) {
  if (d.empty() || d[0] != kBatch)
    return op.error("gives " + dims_text(d) +
                    ", without the batch axis first: Troupe keeps the examples of a batch apart");
  TensorSpec s;
  s.kind = kind;
  for (size_t i = 1; i < d.size(); ++i) {
    if (d[i] == kBatch)
      return op.error("gives " + dims_text(d) + ", the batch's size on a second axis");
    s.shape.push_back(d[i]);
  }
  return s;
}

Shape with_batch(const Dims& d, int64_t batch) {
  std::vector<int64_t> out = d;
  for (auto& v : out)
    if (v == kBatch) v = batch;
  return Shape(out);
}

}  // namespace troupe::core::ops
