#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
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
using VectorMap = Eigen::Map<Eigen::VectorXf, Eigen::Unaligned>;
using ConstVectorMap = Eigen::Map<const Eigen::VectorXf, Eigen::Unaligned>;

/// A non-owning, mutable view of row-major float32 data.
class TensorView {
 public:
  TensorView() = default;
  TensorView(float* data, Shape shape) : data_(data), shape_(shape) {}

  float* data() const { return data_; }
  const Shape& shape() const { return shape_; }
  int64_t size() const { return shape_.num_elements(); }
  float& operator[](int64_t i) const { return data_[i]; }
  /// The same data seen with another shape of equal size.
  TensorView reshaped(Shape shape) const;
  /// Rows [begin, end) of the first axis.
  TensorView rows(int64_t begin, int64_t end) const;
  /// The data as a matrix of dim0 rows and row_size() columns.
  MatrixMap matrix() const;
  VectorMap flat() const { return VectorMap(data_, size()); }

 private:
  float* data_ = nullptr;
  Shape shape_;
};

/// A non-owning, read-only view of row-major float32 data.
class ConstTensorView {
 public:
  ConstTensorView() = default;
  ConstTensorView(const float* data, Shape shape) : data_(data), shape_(shape) {}
  ConstTensorView(const TensorView& v) : data_(v.data()), shape_(v.shape()) {}  // NOLINT

  const float* data() const { return data_; }
  const Shape& shape() const { return shape_; }
  int64_t size() const { return shape_.num_elements(); }
  float operator[](int64_t i) const { return data_[i]; }
  ConstTensorView reshaped(Shape shape) const;
  ConstTensorView rows(int64_t begin, int64_t end) const;
  ConstMatrixMap matrix() const;
  ConstVectorMap flat() const { return ConstVectorMap(data_, size()); }

 private:
  const float* data_ = nullptr;
  Shape shape_;
};

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
