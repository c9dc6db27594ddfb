#include "core/tensor.hpp"

#include "core/backend.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <malloc.h>
#include <unistd.h>

namespace troupe::core {

namespace {

// Process-wide settings for the math kernels, applied once when core is loaded.
//
// 1. Eigen's GEMM allocates its packing workspace on every product. Above glibc's mmap
//    threshold (128 KiB by default) each allocation is a fresh mmap and each free a munmap,
//    so every product page-faults its workspace in again: the [128,784]x[784,128] forward
//    product ran at 40% speed with 200k minor faults per second (bench_train_step). Raising
//    the mmap and trim thresholds keeps such blocks in the heap.
// 2. Eigen sizes its blocks from cache sizes it queries lazily; the VM reports a 384 MiB
//    L3, so the sizes are set explicitly from sysconf with L3 capped at 32 MiB.
const bool math_settings_applied = [] {
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  const long l1 = sysconf(_SC_LEVEL1_DCACHE_SIZE);
  const long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
  const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
  if (l1 <= 0 || l2 <= 0) return false;
  Eigen::setCpuCacheSizes(l1, l2, std::min<long>(l3 > 0 ? l3 : l2, 32L << 20));
  return true;
}();

}  // namespace

Shape::Shape(std::initializer_list<int64_t> dims) {
  TROUPE_ASSERT(dims.size() <= max_rank, "rank above Shape::max_rank");
  for (int64_t d : dims)
    dims_[static_cast<size_t>(rank_++)] = d;
}

Shape::Shape(const std::vector<int64_t>& dims) {
  TROUPE_ASSERT(dims.size() <= max_rank, "rank above Shape::max_rank");
  for (int64_t d : dims)
    dims_[static_cast<size_t>(rank_++)] = d;
}

int64_t Shape::num_elements() const {
  int64_t n = 1;
  for (int i = 0; i < rank_; ++i)
    n *= dims_[static_cast<size_t>(i)];
  return n;
}

int64_t Shape::row_size() const {
  int64_t n = 1;
  for (int i = 1; i < rank_; ++i)
    n *= dims_[static_cast<size_t>(i)];
  return n;
}

std::string Shape::to_string() const {
  std::string s = "[";
  for (int i = 0; i < rank_; ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(dims_[static_cast<size_t>(i)]);
  }
  return s + "]";
}

bool Shape::operator==(const Shape& other) const {
  if (rank_ != other.rank_) return false;
  for (int i = 0; i < rank_; ++i)
    if (dims_[static_cast<size_t>(i)] != other.dims_[static_cast<size_t>(i)]) return false;
  return true;
}

Tensor::Tensor(Shape shape, float fill)
    : host_(static_cast<size_t>(shape.num_elements()), fill), shape_(shape) {
  ptr_ = host_.data();
}

Tensor::Tensor(Shape shape, std::vector<float> values)
    : host_(values.begin(), values.end()), shape_(shape) {
  TROUPE_ASSERT(static_cast<int64_t>(host_.size()) == shape.num_elements(),
                "value count does not match the shape");
  ptr_ = host_.data();
}

Tensor::Tensor(Shape shape, DType dtype, Device device)
    : shape_(shape), device_(device), dtype_(dtype) {
  reserve_bytes(bytes());
  fill(0.0f);
}

Tensor::Tensor(const Tensor& other)
    : shape_(other.shape_), device_(other.device_), dtype_(other.dtype_) {
  if (other.ptr_ == nullptr) return;  // a default-made tensor stays without storage
  reserve_bytes(bytes());
  if (bytes() > 0) core::copy(other.view(), view());
}

Tensor& Tensor::operator=(const Tensor& other) {
  if (this == &other) return *this;
  if (device_ != other.device_) {
    host_.clear();
    host_.shrink_to_fit();
    device_memory_.reset();
    device_capacity_ = 0;
    ptr_ = nullptr;
  }
  device_ = other.device_;
  dtype_ = other.dtype_;
  shape_ = other.shape_;
  if (other.ptr_ == nullptr) {
    ptr_ = nullptr;
    host_.clear();
    return *this;
  }
  reserve_bytes(bytes());
  if (bytes() > 0) core::copy(other.view(), view());
  return *this;
}

Tensor::Tensor(Tensor&& other) noexcept
    : host_(std::move(other.host_)),
      device_memory_(std::move(other.device_memory_)),
      device_capacity_(other.device_capacity_),
      ptr_(other.ptr_),
      shape_(other.shape_),
      device_(other.device_),
      dtype_(other.dtype_) {
  other.host_.clear();
  other.device_capacity_ = 0;
  other.ptr_ = nullptr;
  other.shape_ = Shape();
}

Tensor& Tensor::operator=(Tensor&& other) noexcept {
  if (this == &other) return *this;
  host_ = std::move(other.host_);
  device_memory_ = std::move(other.device_memory_);
  device_capacity_ = other.device_capacity_;
  ptr_ = other.ptr_;
  shape_ = other.shape_;
  device_ = other.device_;
  dtype_ = other.dtype_;
  other.host_.clear();
  other.device_capacity_ = 0;
  other.ptr_ = nullptr;
  other.shape_ = Shape();
  return *this;
}

Tensor::~Tensor() = default;

Tensor Tensor::from_view(ConstTensorView v) {
  Tensor t;
  t.device_ = v.device();
  t.dtype_ = v.dtype();
  if (v.data() == nullptr) {
    t.shape_ = v.shape();
    return t;
  }
  t.resize(v.shape());
  if (v.size() > 0) core::copy(v, t.view());
  return t;
}

Tensor Tensor::to(Device device) const {
  Tensor t;
  t.device_ = device;
  t.dtype_ = dtype_;
  if (ptr_ == nullptr) {
    t.shape_ = shape_;
    return t;
  }
  t.resize(shape_);
  if (size() > 0) core::copy(view(), t.view());
  return t;
}

void Tensor::reserve_bytes(size_t bytes) {
  if (device_.is_cpu()) {
    const size_t floats = (bytes + sizeof(float) - 1) / sizeof(float);
    if (host_.size() < floats) host_.resize(floats);
    ptr_ = host_.data();
    return;
  }
  if (device_capacity_ >= bytes && device_memory_) {
    ptr_ = device_memory_.get();
    return;
  }
  auto backend = backend_for(device_);
  TROUPE_ASSERT(backend.ok(), "a tensor on a device no backend serves");
  device_memory_.reset();  // back to the pool before the larger block is taken
  device_memory_ = (*backend)->allocate(bytes);
  device_capacity_ = bytes;
  ptr_ = device_memory_.get();
}

void Tensor::set(ConstTensorView src) {
  if (dtype_ != src.dtype() && ptr_ != nullptr) {
    *this = Tensor(src.shape(), src.dtype(), device_);
  } else {
    dtype_ = src.dtype();
    resize(src.shape());
  }
  if (src.size() > 0 && src.data() != nullptr) core::copy(src, view());
}

void Tensor::resize(Shape shape) {
  shape_ = shape;
  reserve_bytes(bytes());
}

void Tensor::fill(float value) {
  if (device_.is_cpu() && dtype_ == DType::float32) {
    std::fill_n(host_.begin(), size(), value);
    return;
  }
  if (size() == 0) return;
  auto backend = backend_for(device_);
  TROUPE_ASSERT(backend.ok(), "a tensor on a device no backend serves");
  (*backend)->fill(view(), value);
}

void copy(ConstTensorView src, TensorView dst) {
  TROUPE_ASSERT(src.size() == dst.size() && src.dtype() == dst.dtype(),
                "copy between tensors of different sizes or types");
  if (src.size() == 0) return;
  if (src.device().is_cpu() && dst.device().is_cpu()) {
    std::memmove(dst.data(), src.data(), src.bytes());
    return;
  }
  const Device on = src.device().is_cpu() ? dst.device() : src.device();
  TROUPE_ASSERT(src.device().is_cpu() || dst.device().is_cpu() || src.device() == dst.device(),
                "copy between two devices goes through the host");
  auto backend = backend_for(on);
  TROUPE_ASSERT(backend.ok(), "a tensor on a device no backend serves");
  (*backend)->copy(dst.data(), dst.device(), src.data(), src.device(), src.bytes());
}

ConstTensorView on(Device device, ConstTensorView v, Tensor& staging) {
  if (v.device() == device || v.data() == nullptr) return v;
  if (staging.device() != device || staging.dtype() != v.dtype() || staging.bytes() < v.bytes() ||
      staging.data() == nullptr)
    staging = Tensor(v.shape(), v.dtype(), device);
  staging.resize(v.shape());
  copy(v, staging);
  return staging;
}

float max_abs_diff(ConstTensorView a, ConstTensorView b) {
  TROUPE_ASSERT(a.shape() == b.shape(), "max_abs_diff of tensors of different shapes");
  TROUPE_ASSERT(a.host_float32() && b.host_float32(), "max_abs_diff of float32 host views");
  float m = 0.0f;
  for (int64_t i = 0; i < a.size(); ++i)
    m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

}  // namespace troupe::core
