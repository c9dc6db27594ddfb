#include <catch2/catch.hpp>

#include <random>

#include "core/metrics.hpp"

using namespace troupe::core;

TEST_CASE("Accuracy counts argmax hits and merges exactly", "[metrics]") {
  Tensor logits(Shape{3, 3},
                std::vector<float>{0.1f, 0.9f, 0.0f, 2.0f, 1.0f, 0.0f, 0.0f, 0.0f, 5.0f});
  const int32_t labels[] = {1, 1, 2};
  Accuracy a, b;
  a.update(logits, labels);
  CHECK(a.result() == Approx(2.0 / 3.0));
  b.update(logits.view().rows(0, 1), labels);
  b.merge(a);
  CHECK(b.result() == Approx(3.0 / 4.0));
  CHECK(b.count() == 4);
}

TEST_CASE("BinaryAccuracy thresholds probabilities", "[metrics]") {
  Tensor p(Shape{4}, std::vector<float>{0.2f, 0.7f, 0.51f, 0.49f});
  const float y[] = {0, 1, 0, 1};
  BinaryAccuracy acc;
  acc.update(p, y);
  CHECK(acc.result() == Approx(0.5));
}

TEST_CASE("AUC agrees with the exact pairwise AUC", "[metrics]") {
  std::mt19937 rng(5);
  std::normal_distribution<float> noise(0.0f, 0.2f);
  const int n = 4000;
  Tensor p(Shape{n});
  std::vector<float> y(n);
  for (int i = 0; i < n; ++i) {
    y[static_cast<size_t>(i)] = static_cast<float>(i % 3 == 0);
    p[i] = std::clamp(0.35f + 0.3f * y[static_cast<size_t>(i)] + noise(rng), 0.0f, 1.0f);
  }
  double wins = 0, pairs = 0;
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j)
      if (y[static_cast<size_t>(i)] > 0.5f && y[static_cast<size_t>(j)] < 0.5f) {
        pairs += 1;
        wins += p[i] > p[j] ? 1.0 : (p[i] == p[j] ? 0.5 : 0.0);
      }
  AUC auc(1000);
  auc.update(p, y.data());
  CHECK(auc.result() == Approx(wins / pairs).margin(2e-3));
  CHECK(auc.result() > 0.8);

  // Merging two halves equals one pass.
  AUC first(1000), second(1000);
  first.update(p.view().rows(0, n / 2), y.data());
  second.update(p.view().rows(n / 2, n), y.data() + n / 2);
  first.merge(second);
  CHECK(first.result() == Approx(auc.result()));

  AUC perfect;
  Tensor q(Shape{4}, std::vector<float>{0.1f, 0.2f, 0.8f, 0.9f});
  const float yq[] = {0, 0, 1, 1};
  perfect.update(q, yq);
  CHECK(perfect.result() == Approx(1.0));
}

TEST_CASE("Mean is weighted", "[metrics]") {
  Mean m;
  m.update(1.0, 3.0);
  m.update(3.0, 1.0);
  CHECK(m.result() == Approx(1.5));
}
