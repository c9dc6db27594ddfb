#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <type_traits>
#include <vector>

#include <Eigen/Core>

#include "core/assert.hpp"
#include "core/device.hpp"
#include "core/device_memory.hpp"

namespace troupe::core {

/// A tensor shape of rank 0..6, stored inline (no heap), so views are cheap to make.
class Shape {
 public:
  static constexpr int max_rank = 6;

  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);
  explicit Shape(const std::vector<int64_t>& dims);

  int rank() const { return rank_; }
  int64_t operator[](int i) const { return dims_[static_cast<size_t>(i)]; }
  int64_t& operator[](int i) { return dims_[static_cast<size_t>(i)]; }
  int64_t num_elements() const;
  /// Elements per index of the first axis (1 for rank 0 and 1).
  int64_t row_size() const;
  std::vector<int64_t> to_vector() const { return {dims_.begin(), dims_.begin() + rank_}; }
  std::string to_string() const;

  bool operator==(const Shape& other) const;
  bool operator!=(const Shape& other) const { return !(*this == other); }

 private:
  std::array<int64_t, max_rank> dims_{};
  int rank_ = 0;
};

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MatrixMap = Eigen::Map<RowMatrix, Eigen::Unaligned>;
using ConstMatrixMap = Eigen::Map<const RowMatrix, Eigen::Unaligned>;

/// A non-owning view of row-major data: `TensorView` (mutable) and `ConstTensorView`
/// (read-only). A mutable view converts to a read-only one. A view knows where its data
/// lives and its element type; float32 on the CPU unless it says otherwise. data() is a
/// pointer on that device (a CUDA address for cuda:N), so only the device's backend reads
/// it there; matrix() and flat() are for float32 on the CPU.
template <class T>
class BasicTensorView {
 public:
  using Matrix = std::conditional_t<std::is_const_v<T>, const RowMatrix, RowMatrix>;
  using Vector = std::conditional_t<std::is_const_v<T>, const Eigen::VectorXf, Eigen::VectorXf>;
  using Raw = std::conditional_t<std::is_const_v<T>, const void, void>;

  BasicTensorView() = default;
  BasicTensorView(T* data, Shape shape) : data_(data), shape_(shape) {}
  BasicTensorView(Raw* data, Shape shape, Device device, DType dtype)
      : data_(static_cast<T*>(data)), shape_(shape), device_(device), dtype_(dtype) {}
  template <class U, class = std::enable_if_t<std::is_const_v<T> && !std::is_const_v<U>>>
  BasicTensorView(const BasicTensorView<U>& v)  // NOLINT: mutable -> read-only is implicit
      : data_(v.data()), shape_(v.shape()), device_(v.device()), dtype_(v.dtype()) {}

  /// float32 elements; see data_as() for the other types.
  T* data() const { return data_; }
  template <class U>
  std::conditional_t<std::is_const_v<T>, const U, U>* data_as() const {
    return reinterpret_cast<std::conditional_t<std::is_const_v<T>, const U, U>*>(data_);
  }
  const Shape& shape() const { return shape_; }
  Device device() const { return device_; }
  DType dtype() const { return dtype_; }
  bool empty() const { return data_ == nullptr; }
  int64_t size() const { return shape_.num_elements(); }
  size_t bytes() const { return static_cast<size_t>(size()) * dtype_size(dtype_); }
  T& operator[](int64_t i) const { return data_[i]; }

  /// The same data seen with another shape of equal size.
  BasicTensorView reshaped(Shape shape) const {
    TROUPE_ASSERT(shape.num_elements() == size(), "reshape to a different number of elements");
    return {data_, shape, device_, dtype_};
  }
  /// Rows [begin, end) of the first axis.
  BasicTensorView rows(int64_t begin, int64_t end) const {
    TROUPE_ASSERT(shape_.rank() >= 1 && 0 <= begin && begin <= end && end <= shape_[0],
                  "row range outside the tensor");
    Shape s = shape_;
    s[0] = end - begin;
    using Byte = std::conditional_t<std::is_const_v<T>, const char, char>;
    const auto offset = static_cast<size_t>(begin * shape_.row_size()) * dtype_size(dtype_);
    return {reinterpret_cast<Byte*>(data_) + offset, s, device_, dtype_};
  }
  /// The data as a matrix of dim0 rows (1 for a scalar) and row_size() columns.
  Eigen::Map<Matrix, Eigen::Unaligned> matrix() const {
    TROUPE_ASSERT(host_float32(), "matrix() of a view that is not float32 on the CPU");
    return {data_, shape_.rank() == 0 ? 1 : shape_[0], shape_.row_size()};
  }
  Eigen::Map<Vector, Eigen::Unaligned> flat() const {
    TROUPE_ASSERT(host_float32(), "flat() of a view that is not float32 on the CPU");
    return {data_, size()};
  }
  bool host_float32() const { return device_.is_cpu() && dtype_ == DType::float32; }

 private:
  T* data_ = nullptr;
  Shape shape_;
  Device device_;
  DType dtype_ = DType::float32;
};

using TensorView = BasicTensorView<float>;
using ConstTensorView = BasicTensorView<const float>;

/// Owning row-major storage, float32 on the CPU unless made otherwise. CPU storage is
/// 64-byte aligned; a device's comes from its backend's pool. Resizing to the same or a
/// smaller number of bytes never reallocates, so per-step buffers are allocated once.
/// Copies are deep, on the tensor's own device.
///
///   Tensor w(Shape{784, 128});                                   // cpu, float32, zeros
///   Tensor g(Shape{784, 128}, DType::float32, Device::cuda(0));  // on the GPU, zeros
///   Tensor back = g.to(Device::cpu());                           // copied to the host
class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(Shape shape, float fill = 0.0f);
  Tensor(Shape shape, std::vector<float> values);
  /// Zeros of `dtype` on `device` (a device no backend serves is an invariant break: pick
  /// devices through core::select_device, which says why one cannot be had).
  Tensor(Shape shape, DType dtype, Device device);
  Tensor(const Tensor& other);
  Tensor& operator=(const Tensor& other);
  Tensor(Tensor&& other) noexcept;
  Tensor& operator=(Tensor&& other) noexcept;
  ~Tensor();

  /// A copy of the view's data, on its device, of its type.
  static Tensor from_view(ConstTensorView v);
  /// A copy on `device` (the same type).
  Tensor to(Device device) const;

  float* data() { return static_cast<float*>(ptr_); }
  const float* data() const { return static_cast<const float*>(ptr_); }
  template <class U>
  U* data_as() {
    return static_cast<U*>(ptr_);
  }
  template <class U>
  const U* data_as() const {
    return static_cast<const U*>(ptr_);
  }
  const Shape& shape() const { return shape_; }
  Device device() const { return device_; }
  DType dtype() const { return dtype_; }
  int64_t size() const { return shape_.num_elements(); }
  size_t bytes() const { return static_cast<size_t>(size()) * dtype_size(dtype_); }
  /// Host float32 elements only.
  float& operator[](int64_t i) { return data()[i]; }
  float operator[](int64_t i) const { return data()[i]; }

  /// Takes `src`'s shape and values (of its type), staying on this tensor's device: how a
  /// value from the host (a pull, a checkpoint) reaches a variable on a device.
  void set(ConstTensorView src);
  /// Changes the shape; keeps the allocation when it is large enough. Contents unspecified.
  void resize(Shape shape);
  /// Every element `value` (float types; on any device).
  void fill(float value);

  TensorView view() { return {ptr_, shape_, device_, dtype_}; }
  ConstTensorView view() const { return {ptr_, shape_, device_, dtype_}; }
  operator TensorView() { return view(); }             // NOLINT: views are cheap
  operator ConstTensorView() const { return view(); }  // NOLINT
  MatrixMap matrix() { return view().matrix(); }
  ConstMatrixMap matrix() const { return view().matrix(); }

 private:
  void reserve_bytes(size_t bytes);

  // CPU storage (any type: its bytes, rounded up to floats), or a device's memory.
  std::vector<float, Eigen::aligned_allocator<float>> host_;
  DeviceMemory device_memory_;
  size_t device_capacity_ = 0;
  void* ptr_ = nullptr;
  Shape shape_;
  Device device_;
  DType dtype_ = DType::float32;
};

/// Copies `src` into `dst`, between any devices; both of one type and the same number of
/// elements. A copy to the host has arrived when it returns.
void copy(ConstTensorView src, TensorView dst);
/// `v` on `device`: `v` itself when it is there, else a copy in `staging` (reallocated only
/// when it must grow, so a step's copies reuse one allocation). How batches, labels and
/// pulled rows reach a device, and gradients come back to be pushed.
ConstTensorView on(Device device, ConstTensorView v, Tensor& staging);
/// Largest absolute element-wise difference of float32 host views; shapes must match.
float max_abs_diff(ConstTensorView a, ConstTensorView b);

}  // namespace troupe::core
