#include "core/graph/metric_state.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/metrics.hpp"

namespace troupe::core::graph {

std::vector<std::string> CompileConfig::history_names() const {
  std::vector<std::string> names{"loss"};
  for (const auto& m : metrics)
    names.push_back(m.name);
  for (const auto& o : outputs)
    if (!o.loss_name.empty()) names.push_back(o.loss_name);
  return names;
}

namespace {

int64_t argmax(const float* row, int64_t c) {
  int64_t best = 0;  // the first of equal ones, as ops.argmax
  for (int64_t j = 1; j < c; ++j)
    if (row[j] > row[best]) best = j;
  return best;
}

}  // namespace

double MetricState::result() const {
  if (is_auc())
    // core::AUC's area over its buckets (pairs in one bucket counting one half) is the
    // trapezoidal area Keras's AUC interpolates between its thresholds.
    return AUC::from_counts(positives, negatives).result();
  return count == 0 ? 0.0 : total / static_cast<double>(count);
}

Status MetricState::merge(const MetricState& other) {
  if (other.positives.size() != positives.size() && !positives.empty() && !other.positives.empty())
    return make_error(Errc::invalid_argument,
                      "merging AUC states of " + std::to_string(positives.size()) + " and " +
                          std::to_string(other.positives.size()) + " buckets");
  total += other.total;
  count += other.count;
  if (positives.empty()) {
    positives = other.positives;
    negatives = other.negatives;
  } else {
    for (size_t b = 0; b < other.positives.size(); ++b) {
      positives[b] += other.positives[b];
      negatives[b] += other.negatives[b];
    }
  }
  return {};
}

void MetricState::reset() {
  total = 0.0;
  count = 0;
  std::fill(positives.begin(), positives.end(), 0);
  std::fill(negatives.begin(), negatives.end(), 0);
}

Status MetricStates::merge(const MetricStates& other) {
  if (values.empty()) {
    values = other.values;
    return {};
  }
  if (other.values.size() != values.size())
    return make_error(Errc::invalid_argument, "merging metric states of " +
                                                  std::to_string(values.size()) + " and " +
                                                  std::to_string(other.values.size()) + " values");
  for (size_t i = 0; i < values.size(); ++i)
    if (auto st = values[i].merge(other.values[i]); !st) return st;
  return {};
}

void MetricStates::reset() {
  for (auto& v : values)
    v.reset();
}

int64_t auc_bucket(float p, int64_t num_thresholds) {
  // Keras clips to [0, 1] first; NaN (a diverged model) goes to the lowest bucket.
  if (!(p > 0.0f)) return 0;
  if (p > 1.0f) p = 1.0f;
  const float b = std::ceil(p * static_cast<float>(num_thresholds - 1)) - 1.0f;
  return b < 0.0f ? 0 : static_cast<int64_t>(b);
}

void update_metric(const MetricSpec& m, const float* pred, int64_t rows, int64_t classes,
                   const float* labels, int64_t label_count, MetricState& s) {
  const int64_t n = rows * classes;
  switch (m.kind) {
    case MetricKind::binary_accuracy: {
      // Keras: the label equals (p > threshold) as a number; a label of 0.7 never does.
      int64_t correct = 0;
      for (int64_t i = 0; i < n; ++i)
        correct += labels[i] == (pred[i] > m.threshold ? 1.0f : 0.0f);
      s.total += static_cast<double>(correct);
      s.count += n;
      return;
    }
    case MetricKind::categorical_accuracy: {
      int64_t correct = 0;
      for (int64_t r = 0; r < rows; ++r)
        correct += argmax(labels + r * classes, classes) == argmax(pred + r * classes, classes);
      s.total += static_cast<double>(correct);
      s.count += rows;
      return;
    }
    case MetricKind::sparse_categorical_accuracy: {
      int64_t correct = 0;
      for (int64_t r = 0; r < rows; ++r)
        correct += labels[r] == static_cast<float>(argmax(pred + r * classes, classes));
      s.total += static_cast<double>(correct);
      s.count += rows;
      return;
    }
    case MetricKind::mean_squared_error: {
      // The mean over the last axis, then the mean of those over rows.
      double sum = 0.0;
      for (int64_t r = 0; r < rows; ++r) {
        float row = 0.0f;
        for (int64_t j = 0; j < classes; ++j) {
          const float d = labels[r * classes + j] - pred[r * classes + j];
          row += d * d;
        }
        sum += static_cast<double>(row / static_cast<float>(classes));
      }
      s.total += sum;
      s.count += rows;
      return;
    }
    case MetricKind::auc: {
      const auto buckets = static_cast<size_t>(m.num_thresholds);
      if (s.positives.size() != buckets) {
        s.positives.assign(buckets, 0);
        s.negatives.assign(buckets, 0);
      }
      for (int64_t i = 0; i < std::min(n, label_count); ++i) {
        const float p = m.from_logits ? 1.0f / (1.0f + std::exp(-pred[i])) : pred[i];
        const auto b = static_cast<size_t>(auc_bucket(p, m.num_thresholds));
        ++(labels[i] != 0.0f ? s.positives : s.negatives)[b];
      }
      return;
    }
  }
}

}  // namespace troupe::core::graph
