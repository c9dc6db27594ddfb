#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/data/columns.hpp"
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
/// (row_splits has n + 1 entries); labels as floats and as class indices. A batch for a
/// model with named inputs (core/data/named_input.hpp) has only `columns`, one per input
/// and label, each of shape [n, ...].
struct Batch {
  Tensor features;
  std::vector<float> labels;
  std::vector<int32_t> classes;
  std::vector<int64_t> ids;
  std::vector<float> values;
  std::vector<int64_t> row_splits;
  std::vector<Column> columns;

  /// Examples in the batch: labels.size(), or for a batch of columns only, the first
  /// column's first dimension.
  int64_t size() const {
    if (!labels.empty() || columns.empty()) return static_cast<int64_t>(labels.size());
    const Shape& s = columns.front().shape;
    return s.rank() == 0 ? 0 : s[0];
  }
  /// The column of that name; null when the batch has none.
  const Column* column(const std::string& name) const;
};

/// Stacks examples into a batch. Dense features must have one width across the batch.
Batch collate(const std::vector<Example>& examples);

/// Dense examples as a Keras classifier reads them, a batch of named columns: `features`
/// [n, d] (floats; one width across the batch) and `label` [n] (ints: the class ids).
Batch collate_classes(const std::vector<Example>& examples);

}  // namespace troupe::core
