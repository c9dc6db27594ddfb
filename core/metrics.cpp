#include "core/metrics.hpp"

#include <algorithm>

#include "core/backend.hpp"

namespace troupe::core {

void Accuracy::update(ConstTensorView logits, const int32_t* labels) {
  TROUPE_ASSERT(logits.shape().rank() == 2, "Accuracy: logits must be [batch, classes]");
  const auto z = logits.matrix();
  for (Eigen::Index i = 0; i < z.rows(); ++i) {
    Eigen::Index arg = 0;
    z.row(i).maxCoeff(&arg);
    correct_ += (arg == labels[i]) ? 1 : 0;
  }
  total_ += z.rows();
}

void Accuracy::update(ConstTensorView logits, ConstTensorView labels) {
  TROUPE_ASSERT(logits.shape().rank() == 2, "Accuracy: logits must be [batch, classes]");
  if (logits.device().is_cpu()) {
    update(logits, labels.data_as<int32_t>());
    return;
  }
  auto backend = backend_for(logits.device());
  TROUPE_ASSERT(backend.ok(), "logits on a device no backend serves");
  add((*backend)->count_correct(logits, labels), logits.shape()[0]);
}

void Accuracy::merge(const Accuracy& other) {
  correct_ += other.correct_;
  total_ += other.total_;
}

void BinaryAccuracy::update(ConstTensorView probabilities, const float* labels) {
  for (int64_t i = 0; i < probabilities.size(); ++i)
    correct_ += ((probabilities[i] > threshold_) == (labels[i] > 0.5f)) ? 1 : 0;
  total_ += probabilities.size();
}

void BinaryAccuracy::merge(const BinaryAccuracy& other) {
  correct_ += other.correct_;
  total_ += other.total_;
}

AUC::AUC(int num_buckets)
    : pos_(static_cast<size_t>(num_buckets)), neg_(static_cast<size_t>(num_buckets)) {
  TROUPE_ASSERT(num_buckets >= 2, "AUC needs at least 2 buckets");
}

void AUC::update(ConstTensorView probabilities, const float* labels) {
  const auto n = static_cast<float>(pos_.size());
  for (int64_t i = 0; i < probabilities.size(); ++i) {
    const float p = std::clamp(probabilities[i], 0.0f, 1.0f);
    const auto b = std::min(pos_.size() - 1, static_cast<size_t>(p * n));
    (labels[i] > 0.5f ? pos_ : neg_)[b] += 1;
  }
}

AUC AUC::from_counts(std::vector<int64_t> positives, std::vector<int64_t> negatives) {
  TROUPE_ASSERT(positives.size() == negatives.size() && positives.size() >= 2,
                "AUC histograms of different lengths");
  AUC a(static_cast<int>(positives.size()));
  a.pos_ = std::move(positives);
  a.neg_ = std::move(negatives);
  return a;
}

void AUC::merge(const AUC& other) {
  TROUPE_ASSERT(other.pos_.size() == pos_.size(), "merging AUCs of different bucket counts");
  for (size_t i = 0; i < pos_.size(); ++i) {
    pos_[i] += other.pos_[i];
    neg_[i] += other.neg_[i];
  }
}

double AUC::result() const {
  // P(score of a random positive > score of a random negative), ties counting one half.
  double negatives_below = 0.0, wins = 0.0, positives = 0.0;
  for (size_t i = 0; i < pos_.size(); ++i) {
    const auto p = static_cast<double>(pos_[i]), q = static_cast<double>(neg_[i]);
    wins += p * (negatives_below + 0.5 * q);
    negatives_below += q;
    positives += p;
  }
  const double pairs = positives * negatives_below;
  return pairs == 0.0 ? 0.0 : wins / pairs;
}

void AUC::reset() {
  std::fill(pos_.begin(), pos_.end(), 0);
  std::fill(neg_.begin(), neg_.end(), 0);
}

}  // namespace troupe::core
