#include "core/graph/operation.hpp"

namespace troupe::core::graph {

int64_t TensorSpec::per_example() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

bool fits_elements(const std::vector<int64_t>& dims, int64_t limit) {
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0) return false;
    if (d != 0 && n > limit / d) return false;
    n *= d;
  }
  return n <= limit;
}

Shape TensorSpec::with_batch(int64_t batch) const {
  std::vector<int64_t> dims{batch};
  dims.insert(dims.end(), shape.begin(), shape.end());
  return Shape(dims);
}

const char* kind_name(ColumnKind kind) {
  switch (kind) {
    case ColumnKind::floats:
      return "float32";
    case ColumnKind::ints:
      return "int64";
    case ColumnKind::strings:
      return "string";
  }
  return "?";
}

std::string TensorSpec::to_string() const {
  std::string s = std::string(kind_name(kind)) + "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i == 0 ? "" : ", ") + std::to_string(shape[i]);
  return s + "]";
}

Status Operation::to(Device device, Precision precision) {
  auto backend = backend_for(device);
  if (!backend) return backend.error();
  for (Kernel k : kernels())
    if (!(*backend)->has(k))
      return make_error(Errc::invalid_argument,
                        std::string(is_layer() ? "layer '" : "operation '") + name_ + "' (" +
                            class_name_ + ") needs the kernel '" + kernel_name(k) + "', which " +
                            (*backend)->name() + " does not have");
  for (auto& w : weights_)  // tables stay on the host: rows travel, not tables
    if (!w.table && w.value.device() != device) w.value = w.value.to(device);
  device_ = device;
  precision_ = precision;
  backend_ = *backend;
  return {};
}

Error Operation::error(const std::string& what) const {
  return make_error(Errc::invalid_argument, std::string(is_layer() ? "layer '" : "operation '") +
                                                name_ + "' (" + class_name_ + "): " + what);
}

Weight& Operation::add_weight(std::string name, Shape shape, Initializer init, bool trainable) {
  Weight w;
  w.name = std::move(name);
  if (!fits_elements(shape.to_vector(), kMaxWeightElements)) {
    // Not allocated: the graph reports weight_status() when the build returns.
    if (weight_status_)
      weight_status_ =
          error("weight '" + w.name + "' of " + shape.to_string() + " is over Troupe's limit of " +
                std::to_string(kMaxWeightElements) + " elements");
    w.trainable = trainable;
    w.init = init;
    w.shape = shape;
    weights_.push_back(std::move(w));
    return weights_.back();
  }
  w.value = initialize(shape, init);
  if (!device_.is_cpu()) w.value = w.value.to(device_);
  w.trainable = trainable;
  w.init = init;
  w.shape = shape;
  weights_.push_back(std::move(w));
  return weights_.back();
}

Weight& Operation::add_table(std::string name, Shape shape, Initializer init) {
  if (weight_status_ && !fits_elements(shape.to_vector(), kMaxTableElements))
    weight_status_ =
        error("table '" + name + "' of " + shape.to_string() + " is over Troupe's limit of " +
              std::to_string(kMaxTableElements) + " elements");
  Weight w;
  w.name = std::move(name);
  w.trainable = true;
  w.init = init;
  w.table = true;
  w.shape = shape;
  weights_.push_back(std::move(w));
  return weights_.back();
}

Tensor& Operation::place(Tensor& t, const Shape& shape, DType dtype) {
  if (t.device() != device_ || t.dtype() != dtype)
    t = Tensor(shape, dtype, device_);
  else
    t.resize(shape);
  return t;
}

ConstTensorView as_rows(ConstTensorView v) {
  const Shape& s = v.shape();
  if (s.rank() <= 1) return v.reshaped(Shape{s.rank() == 0 ? 1 : s[0], 1});
  const int64_t last = s[s.rank() - 1];
  return v.reshaped(Shape{v.size() / (last == 0 ? 1 : last), last});
}

TensorView as_rows(TensorView v) {
  const Shape& s = v.shape();
  if (s.rank() <= 1) return v.reshaped(Shape{s.rank() == 0 ? 1 : s[0], 1});
  const int64_t last = s[s.rank() - 1];
  return v.reshaped(Shape{v.size() / (last == 0 ? 1 : last), last});
}

}  // namespace troupe::core::graph
