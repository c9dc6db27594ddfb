#pragma once

// What flows along the edges of a layer graph: each tensor's kind and per-example shape
// (TensorSpec, fixed when the graph is built) and, during a step, a view of its value
// (Ref). Float tensors live on the graph's device; integer ids and strings stay on the
// host, where the lookup layers and the embedding tables' bookkeeping read them.

#include <cstdint>
#include <string>
#include <vector>

#include "core/data/columns.hpp"
#include "core/tensor.hpp"

namespace troupe::core::graph {

/// A tensor's kind and its shape per example (Keras's shape without the batch axis).
struct TensorSpec {
  ColumnKind kind = ColumnKind::floats;
  std::vector<int64_t> shape;

  int64_t per_example() const;
  /// [batch] + shape.
  Shape with_batch(int64_t batch) const;
  /// "float32[8, 4]", "int64[]", "string[3]".
  std::string to_string() const;
  bool operator==(const TensorSpec& o) const { return kind == o.kind && shape == o.shape; }
  bool operator!=(const TensorSpec& o) const { return !(*this == o); }
};

/// The name of a kind as Keras's dtypes say it: "float32", "int64", "string".
const char* kind_name(ColumnKind kind);

/// A tensor's value during one step: float32 on the graph's device; int64 ids on the host;
/// strings on the host (row-major, `shape` says how many).
struct Ref {
  ColumnKind kind = ColumnKind::floats;
  ConstTensorView tensor;  // floats and ints
  const std::vector<std::string>* strings = nullptr;
  Shape shape;  // [batch, ...]

  int64_t batch() const { return shape.rank() == 0 ? 1 : shape[0]; }
  const int64_t* ints() const { return tensor.data_as<int64_t>(); }
};

}  // namespace troupe::core::graph
