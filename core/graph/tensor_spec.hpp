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

/// The most elements a model may ask of one tensor per example, and of one weight a process
/// holds whole (tables aside): far above the models Troupe trains, far below what would
/// exhaust a machine's memory before an error could be given. A model file is outside
/// input: a Dense of 2^40 units is refused at these, naming the layer.
inline constexpr int64_t kMaxTensorElements = int64_t{1} << 28;
inline constexpr int64_t kMaxWeightElements = int64_t{1} << 32;
/// A table's (sharded over PS tasks, or held by one process that can).
inline constexpr int64_t kMaxTableElements = int64_t{1} << 40;

/// Whether every size is >= 0 and their product is at most `limit` (no overflow on the way).
bool fits_elements(const std::vector<int64_t>& dims, int64_t limit);

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
