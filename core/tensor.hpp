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

/// A non-owning view of row-major float32 data: `TensorView` (mutable) and
/// `ConstTensorView` (read-only). A mutable view converts to a read-only one.
template <class T>
class BasicTensorView {
 public:
  using Matrix = std::conditional_t<std::is_const_v<T>, const RowMatrix, RowMatrix>;
  using Vector = std::conditional_t<std::is_const_v<T>, const Eigen::VectorXf, Eigen::VectorXf>;

  BasicTensorView() = default;
  BasicTensorView(T* data, Shape shape) : data_(data), shape_(shape) {}
  template <class U, class = std::enable_if_t<std::is_const_v<T> && !std::is_const_v<U>>>
  BasicTensorView(const BasicTensorView<U>& v)  // NOLINT: mutable -> read-only is implicit
      : data_(v.data()), shape_(v.shape()) {}

  T* data() const { return data_; }
  const Shape& shape() const { return shape_; }
  int64_t size() const { return shape_.num_elements(); }
  T& operator[](int64_t i) const { return data_[i]; }

  /// The same data seen with another shape of equal size.
  BasicTensorView reshaped(Shape shape) const {
    TROUPE_ASSERT(shape.num_elements() == size(), "reshape to a different number of elements");
    return {data_, shape};
  }
  /// Rows [begin, end) of the first axis.
  BasicTensorView rows(int64_t begin, int64_t end) const {
    TROUPE_ASSERT(shape_.rank() >= 1 && 0 <= begin && begin <= end && end <= shape_[0],
                  "row range outside the tensor");
    Shape s = shape_;
    s[0] = end - begin;
    return {data_ + begin * shape_.row_size(), s};
  }
  /// The data as a matrix of dim0 rows (1 for a scalar) and row_size() columns.
  Eigen::Map<Matrix, Eigen::Unaligned> matrix() const {
    return {data_, shape_.rank() == 0 ? 1 : shape_[0], shape_.row_size()};
  }
  Eigen::Map<Vector, Eigen::Unaligned> flat() const { return {data_, size()}; }

 private:
  T* data_ = nullptr;
  Shape shape_;
};

using TensorView = BasicTensorView<float>;
using ConstTensorView = BasicTensorView<const float>;

/// Owning row-major float32 storage, 64-byte aligned. Resizing to the same or a smaller
/// number of elements never reallocates, so per-step buffers are allocated once.
class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(Shape shape, float fill = 0.0f);
  Tensor(Shape shape, std::vector<float> values);

  static Tensor from_view(ConstTensorView v);

  float* data() { return data_.data(); }
  const float* data() const { return data_.data(); }
  const Shape& shape() const { return shape_; }
  int64_t size() const { return shape_.num_elements(); }
  float& operator[](int64_t i) { return data_[static_cast<size_t>(i)]; }
  float operator[](int64_t i) const { return data_[static_cast<size_t>(i)]; }

  /// Changes the shape; keeps the allocation when it is large enough. Contents unspecified.
  void resize(Shape shape);
  void fill(float value);

  TensorView view() { return {data(), shape_}; }
  ConstTensorView view() const { return {data(), shape_}; }
  operator TensorView() { return view(); }             // NOLINT: views are cheap
  operator ConstTensorView() const { return view(); }  // NOLINT
  MatrixMap matrix() { return view().matrix(); }
  ConstMatrixMap matrix() const { return view().matrix(); }

 private:
  std::vector<float, Eigen::aligned_allocator<float>> data_;
  Shape shape_;
};

/// Copies `src` into `dst`; shapes must have the same number of elements.
void copy(ConstTensorView src, TensorView dst);
/// Largest absolute element-wise difference; shapes must match.
float max_abs_diff(ConstTensorView a, ConstTensorView b);

}  // namespace troupe::core
