#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.hpp"

namespace troupe::core {

/// One training example: dense features, optional sparse features (ids with values, as
/// LibSVM rows and categorical fields give), and a label.
struct Example {
  std::vector<float> features;
  std::vector<int64_t> ids;
  std::vector<float> values;  // one per id; empty means all ones
  float label = 0.0f;
};

/// A batch of examples: dense features stacked into [n, d]; sparse features in CSR form
/// (row_splits has n + 1 entries); labels as floats and as class indices.
struct Batch {
  Tensor features;
  std::vector<float> labels;
  std::vector<int32_t> classes;
  std::vector<int64_t> ids;
  std::vector<float> values;
  std::vector<int64_t> row_splits;

  int64_t size() const { return static_cast<int64_t>(labels.size()); }
};

/// Stacks examples into a batch. Dense features must have one width across the batch.
Batch collate(const std::vector<Example>& examples);

}  // namespace troupe::core
