// The losses the built-in programs train with, and ClassifierTrainer's report of each
// gradient as soon as the backward pass makes it final.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <functional>

#include "core/keras/classifier_graph.hpp"
#include "core/keras/classifier_trainer.hpp"
#include "core/nn/losses.hpp"
#include "core/optimizer.hpp"
#include "helpers.hpp"

using namespace troupe::core;
using troupe::test::random_tensor;

namespace {

// Central finite difference of f with respect to x[i]. float32 forward passes and
// eps = 1e-2 keep rounding noise ~1e-4, well under the tolerance below.
double numeric_grad(float* x, const std::function<double()>& f, float eps = 1e-2f) {
  const float saved = *x;
  *x = saved + eps;
  const double up = f();
  *x = saved - eps;
  const double down = f();
  *x = saved;
  return (up - down) / (2.0 * eps);
}

void check_close(double analytic, double numeric, const std::string& what) {
  INFO(what << ": analytic " << analytic << ", numeric " << numeric);
  CHECK(std::fabs(analytic - numeric) <=
        2e-3 + 2e-2 * std::max(std::fabs(analytic), std::fabs(numeric)));
}

}  // namespace

TEST_CASE("Softmax cross-entropy loss and gradient", "[layers]") {
  SoftmaxCrossEntropy ce;
  Tensor logits = random_tensor(Shape{4, 5}, 19, -2.0f, 2.0f);
  const int32_t labels[] = {0, 3, 4, 1};
  auto f = [&] { return static_cast<double>(ce.forward(logits, labels).value()); };
  // Uniform logits give log(classes).
  Tensor zeros(Shape{2, 5});
  const int32_t two[] = {1, 2};
  CHECK(ce.forward(zeros, two).value() == Approx(std::log(5.0)));
  f();
  Tensor g = Tensor::from_view(ce.backward());
  for (int64_t i = 0; i < logits.size(); ++i)
    check_close(g[i], numeric_grad(&logits[i], f), "logit " + std::to_string(i));
  const int32_t bad[] = {0, 5, 1, 1};
  auto err = ce.forward(logits, bad);
  REQUIRE_FALSE(err.ok());
  CHECK(err.error().code == Errc::out_of_range);
}

TEST_CASE("Sigmoid binary cross-entropy loss and gradient", "[layers]") {
  SigmoidBinaryCrossEntropy bce;
  Tensor logits = random_tensor(Shape{6}, 20, -4.0f, 4.0f);
  const float labels[] = {0, 1, 1, 0, 1, 0};
  auto f = [&] { return static_cast<double>(bce.forward(logits, labels).value()); };
  f();
  Tensor g = Tensor::from_view(bce.backward());
  for (int64_t i = 0; i < logits.size(); ++i)
    check_close(g[i], numeric_grad(&logits[i], f), "logit " + std::to_string(i));
  // Huge logits stay finite.
  Tensor big(Shape{2}, std::vector<float>{1000.0f, -1000.0f});
  const float wrong[] = {0.0f, 1.0f};
  CHECK(bce.forward(big, wrong).value() == Approx(1000.0));
}

TEST_CASE("compute_gradients reports each gradient once, as soon as it is final, last first",
          "[layers]") {
  auto mlp = keras::ClassifierGraph::make({false, {6, 5, 4, 3}, 7, true}).value();
  auto sgd = make_optimizer("sgd", 0.1f).value();
  keras::ClassifierTrainer t(*mlp, *sgd);
  Tensor x(Shape{4, 6}, 0.25f);
  for (int64_t i = 0; i < x.size(); ++i)
    x.data()[i] = 0.1f * static_cast<float>(i % 7) - 0.3f;
  const int32_t labels[4] = {0, 1, 2, 1};
  auto& params = t.parameters();
  REQUIRE(params.size() == 6);  // three Dense layers: kernel and bias each
  // The gradients of the plain pass, to compare with.
  REQUIRE(t.compute_gradients(x, labels).ok());
  std::vector<Tensor> expected;
  for (auto& p : params)
    expected.push_back(*p.grad);
  for (auto& p : params)
    p.grad->fill(std::nanf(""));
  std::vector<size_t> order;
  bool first_layer_pending_at_first_report = false;
  auto loss = t.compute_gradients(x, labels, [&](size_t i) {
    if (order.empty()) first_layer_pending_at_first_report = std::isnan(params[0].grad->data()[0]);
    order.push_back(i);
    // Final when reported: equal to the plain pass's.
    for (int64_t k = 0; k < params[i].grad->size(); ++k)
      REQUIRE(params[i].grad->data()[k] == expected[i].data()[k]);
  });
  REQUIRE(loss.ok());
  // Each once, in the graph's order, the last layer's (kernel and bias: 4 and 5) first.
  CHECK(order == mlp->gradient_order());
  std::vector<size_t> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  CHECK(sorted == std::vector<size_t>{0, 1, 2, 3, 4, 5});
  CHECK(order.front() >= 4);
  CHECK(order.back() <= 1);
  CHECK(first_layer_pending_at_first_report);
}
