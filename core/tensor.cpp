#include "core/tensor.hpp"

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
    : data_(static_cast<size_t>(shape.num_elements()), fill), shape_(shape) {}

Tensor::Tensor(Shape shape, std::vector<float> values)
    : data_(values.begin(), values.end()), shape_(shape) {
  TROUPE_ASSERT(static_cast<int64_t>(data_.size()) == shape.num_elements(),
                "value count does not match the shape");
}

Tensor Tensor::from_view(ConstTensorView v) {
  Tensor t;
  t.resize(v.shape());
  if (v.size() > 0) std::memcpy(t.data(), v.data(), static_cast<size_t>(v.size()) * sizeof(float));
  return t;
}

void Tensor::resize(Shape shape) {
  const auto n = static_cast<size_t>(shape.num_elements());
  if (data_.size() < n) data_.resize(n);
  shape_ = shape;
}

void Tensor::fill(float value) {
  std::fill_n(data_.begin(), size(), value);
}

void copy(ConstTensorView src, TensorView dst) {
  TROUPE_ASSERT(src.size() == dst.size(), "copy between tensors of different sizes");
  if (src.size() > 0)
    std::memmove(dst.data(), src.data(), static_cast<size_t>(src.size()) * sizeof(float));
}

float max_abs_diff(ConstTensorView a, ConstTensorView b) {
  TROUPE_ASSERT(a.shape() == b.shape(), "max_abs_diff of tensors of different shapes");
  float m = 0.0f;
  for (int64_t i = 0; i < a.size(); ++i)
    m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

}  // namespace troupe::core
