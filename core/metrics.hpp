#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.hpp"

namespace troupe::core {

/// Streaming metrics. Each keeps counts that merge exactly, so per-worker results can be
/// combined into the same value one process would have computed.

/// Fraction of examples whose largest logit is the label.
class Accuracy {
 public:
  void update(ConstTensorView logits, const int32_t* labels);
  /// The same with int32 labels on the logits' device (SoftmaxCrossEntropy::labels()):
  /// counted there, by its backend.
  void update(ConstTensorView logits, ConstTensorView labels);
  /// Counts made elsewhere (a device's backend counted the correct ones).
  void add(int64_t correct, int64_t total) {
    correct_ += correct;
    total_ += total;
  }
  void merge(const Accuracy& other);
  double result() const { return total_ == 0 ? 0.0 : static_cast<double>(correct_) / total_; }
  void reset() { correct_ = total_ = 0; }
  int64_t count() const { return total_; }
  int64_t correct() const { return correct_; }

 private:
  int64_t correct_ = 0, total_ = 0;
};

/// Fraction of examples with (probability > threshold) == (label > 0.5).
class BinaryAccuracy {
 public:
  explicit BinaryAccuracy(float threshold = 0.5f) : threshold_(threshold) {}
  void update(ConstTensorView probabilities, const float* labels);
  void merge(const BinaryAccuracy& other);
  double result() const { return total_ == 0 ? 0.0 : static_cast<double>(correct_) / total_; }
  void reset() { correct_ = total_ = 0; }

 private:
  float threshold_;
  int64_t correct_ = 0, total_ = 0;
};

/// ROC AUC over probabilities in [0, 1], from histograms of positives and negatives over
/// `num_buckets` equal buckets (Keras uses 200 thresholds). Pairs falling in one bucket count
/// one half, which is the trapezoidal area under the bucketed ROC curve.
class AUC {
 public:
  explicit AUC(int num_buckets = 200);
  void update(ConstTensorView probabilities, const float* labels);
  void merge(const AUC& other);
  double result() const;
  void reset();
  /// The histograms (per bucket: positives, negatives), to carry the metric elsewhere.
  const std::vector<int64_t>& positives() const { return pos_; }
  const std::vector<int64_t>& negatives() const { return neg_; }
  /// An AUC from histograms made by positives() / negatives() (of equal length, >= 2).
  static AUC from_counts(std::vector<int64_t> positives, std::vector<int64_t> negatives);

 private:
  std::vector<int64_t> pos_, neg_;
};

/// Running mean of weighted values.
class Mean {
 public:
  void update(double value, double weight = 1.0) {
    sum_ += value * weight;
    weight_ += weight;
  }
  void merge(const Mean& other) {
    sum_ += other.sum_;
    weight_ += other.weight_;
  }
  double result() const { return weight_ == 0.0 ? 0.0 : sum_ / weight_; }
  void reset() { sum_ = weight_ = 0.0; }

 private:
  double sum_ = 0.0, weight_ = 0.0;
};

}  // namespace troupe::core
