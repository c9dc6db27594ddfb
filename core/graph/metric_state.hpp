#pragma once

// The state of each History value of a compiled model (core/graph/compile.hpp) over the
// batches seen so far: a sum and a count (the losses' and the metrics' means), or an AUC's
// histograms. States merge exactly across workers (sums of counts; sums of doubles) and
// travel as msgpack, so steps return them to a chief, which merges and reads result().
//
//   MetricStates epoch = ...;                 // the chief's
//   epoch.merge(step_result).value();         // a worker's batch
//   epoch.values[i].result();                 // History name i's value

#include <cstdint>
#include <vector>

#include <msgpack.hpp>

#include "core/expected.hpp"
#include "core/graph/compile.hpp"

namespace troupe::core::graph {

struct MetricState {
  /// A mean's sum of values and their count (Keras's Mean metric: losses weighted by the
  /// batch's examples; accuracies by element or row; mean squared error by row).
  double total = 0.0;
  int64_t count = 0;
  /// An AUC's counts of positives and negatives per bucket between its thresholds (Keras's
  /// bucket of a probability p: ceil(p (T - 1)) - 1, at least 0; T entries, the last one
  /// always empty), from which its ROC curve's interpolated area follows exactly.
  std::vector<int64_t> positives, negatives;

  bool is_auc() const { return !positives.empty(); }
  double result() const;
  /// Adds `other`'s counts (the same kind of state; an AUC's of the same thresholds).
  Status merge(const MetricState& other);
  void reset();
  MSGPACK_DEFINE(total, count, positives, negatives);
};

/// Every History value's state, in CompileConfig::history_names()'s order.
struct MetricStates {
  std::vector<MetricState> values;

  Status merge(const MetricStates& other);
  void reset();
  MSGPACK_DEFINE(values);
};

/// Adds a batch to metric `m`'s state from host data: predictions [rows, classes] (an
/// output's, row-major) and labels as floats, `label_count` of them (the predictions' count,
/// or one class index per row for sparse categorical accuracy; checked by the caller).
void update_metric(const MetricSpec& m, const float* pred, int64_t rows, int64_t classes,
                   const float* labels, int64_t label_count, MetricState& s);

/// Keras's AUC bucket of a probability p for `num_thresholds` evenly spaced thresholds.
int64_t auc_bucket(float p, int64_t num_thresholds);

}  // namespace troupe::core::graph
