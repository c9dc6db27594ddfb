#pragma once

#include <cstdint>
#include <vector>

#include "core/expected.hpp"
#include "core/nn/layer.hpp"

namespace troupe::core {

/// A gradient that touches only some rows of a variable: `values` is [rows.size(), width],
/// rows are unique and ascending.
struct SparseGrad {
  std::vector<int64_t> rows;
  Tensor values;
};

/// A lookup table [vocab, dim]: ids of any shape -> embeddings of shape ids_shape + [dim].
/// Its gradient is sparse: only the rows the batch used.
class Embedding {
 public:
  Embedding(std::string name, int64_t vocab, int64_t dim, uint64_t seed);

  /// An id outside [0, vocab) is an out_of_range error naming the id.
  Expected<ConstTensorView> forward(const std::vector<int64_t>& ids, Shape ids_shape);
  /// Sums dy over repeated ids into one row each.
  const SparseGrad& backward(ConstTensorView dy);

  const std::string& name() const { return name_; }
  Tensor& table() { return table_; }
  const SparseGrad& grad() const { return grad_; }

 private:
  std::string name_;
  Tensor table_;
  std::vector<int64_t> ids_;
  Tensor y_;
  SparseGrad grad_;
};

}  // namespace troupe::core
