#include <catch2/catch.hpp>

#include <cmath>
#include <functional>

#include "core/cpu/cpu_backend.hpp"
#include "core/cpu/gemm.hpp"
#include "core/nn/activations.hpp"
#include "core/nn/conv2d.hpp"
#include "core/nn/dense.hpp"
#include "core/nn/embedding.hpp"
#include "core/nn/losses.hpp"
#include "core/nn/sequential.hpp"
#include "core/optimizer.hpp"
#include "core/parallel.hpp"
#include "core/trainer.hpp"
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

// Checks dL/dx and dL/dparams of a layer for L = sum(forward(x) * r), r random.
void gradient_check(Layer& layer, Tensor& x, uint64_t seed) {
  layer.set_input_grad(true);
  const Tensor r = random_tensor(layer.forward(x).shape(), seed);
  auto loss = [&] {
    ConstTensorView y = layer.forward(x);
    double s = 0.0;
    for (int64_t i = 0; i < y.size(); ++i)
      s += static_cast<double>(y[i]) * r[i];
    return s;
  };
  layer.forward(x);
  Tensor dx = Tensor::from_view(layer.backward(r));
  std::vector<Tensor> grads;
  for (auto& p : layer.parameters())
    grads.push_back(Tensor::from_view(*p.grad));

  // Every coordinate of small tensors; a prime stride for larger ones, so that no channel or
  // column is systematically skipped.
  auto stride_of = [](int64_t n) -> int64_t { return n <= 256 ? 1 : 7; };
  const int64_t stride_x = stride_of(x.size());
  for (int64_t i = 0; i < x.size(); i += stride_x)
    check_close(dx[i], numeric_grad(&x[i], loss),
                layer.name() + " input[" + std::to_string(i) + "]");
  auto params = layer.parameters();
  for (size_t k = 0; k < params.size(); ++k) {
    Tensor& v = *params[k].value;
    const int64_t stride = stride_of(v.size());
    for (int64_t i = 0; i < v.size(); i += stride)
      check_close(grads[k][i], numeric_grad(&v[i], loss),
                  params[k].name + "[" + std::to_string(i) + "]");
  }
}

// Values away from 0 so that ReLU's kink is never inside a finite-difference step.
Tensor away_from_zero(Shape s, uint64_t seed) {
  Tensor t = random_tensor(s, seed, 0.1f, 1.0f);
  std::mt19937 rng(static_cast<unsigned>(seed));
  for (int64_t i = 0; i < t.size(); ++i)
    if (rng() & 1u) t[i] = -t[i];
  return t;
}

}  // namespace

TEST_CASE("Dense backward passes a gradient check", "[layers]") {
  Dense d("dense", 7, 5, 1);
  d.bias() = random_tensor(Shape{5}, 9);
  Tensor x = random_tensor(Shape{4, 7}, 2);
  gradient_check(d, x, 3);
}

TEST_CASE("ReLU and Sigmoid backward pass gradient checks", "[layers]") {
  ReLU relu;
  Tensor x = away_from_zero(Shape{3, 6}, 4);
  gradient_check(relu, x, 5);
  Sigmoid sig;
  Tensor x2 = random_tensor(Shape{3, 6}, 6, -3.0f, 3.0f);
  gradient_check(sig, x2, 7);
}

TEST_CASE("Conv2D matches a direct convolution and passes a gradient check", "[layers]") {
  Conv2D conv("conv", 2, 3, 3, 11);
  for (auto& p : conv.parameters())
    *p.value = random_tensor(p.value->shape(), 12);
  Tensor x = random_tensor(Shape{2, 5, 4, 2}, 13);
  ConstTensorView y = conv.forward(x);
  REQUIRE(y.shape() == (Shape{2, 3, 2, 3}));
  const Tensor& w = *conv.parameters()[0].value;
  const Tensor& b = *conv.parameters()[1].value;
  for (int n = 0; n < 2; ++n)
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 2; ++j)
        for (int f = 0; f < 3; ++f) {
          double s = b[f];
          for (int ki = 0; ki < 3; ++ki)
            for (int kj = 0; kj < 3; ++kj)
              for (int c = 0; c < 2; ++c)
                s +=
                    x[((n * 5 + i + ki) * 4 + j + kj) * 2 + c] * w[((ki * 3 + kj) * 2 + c) * 3 + f];
          CHECK(y[((n * 3 + i) * 2 + j) * 3 + f] == Approx(s).margin(1e-5));
        }
  gradient_check(conv, x, 14);
}

TEST_CASE("Reshape and MeanPool backward pass gradient checks", "[layers]") {
  Reshape flat("flatten", Shape{12});
  Tensor x = random_tensor(Shape{2, 3, 4}, 15);
  gradient_check(flat, x, 16);
  MeanPool pool;
  Tensor x2 = random_tensor(Shape{3, 4, 5}, 17);
  gradient_check(pool, x2, 18);
}

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

TEST_CASE("Embedding gathers rows and sums repeated ids in its sparse gradient", "[layers]") {
  Embedding emb("emb", 10, 3, 21);
  const std::vector<int64_t> ids{7, 2, 7, 0};
  ConstTensorView y = emb.forward(ids, Shape{2, 2}).value();
  REQUIRE(y.shape() == (Shape{2, 2, 3}));
  CHECK(y[3 * 2 + 1] == emb.table()[7 * 3 + 1]);
  Tensor r = random_tensor(y.shape(), 22);
  const SparseGrad& g = emb.backward(r);
  REQUIRE(g.rows == std::vector<int64_t>{0, 2, 7});
  auto f = [&] {
    ConstTensorView out = emb.forward(ids, Shape{2, 2}).value();
    double s = 0.0;
    for (int64_t i = 0; i < out.size(); ++i)
      s += static_cast<double>(out[i]) * r[i];
    return s;
  };
  for (size_t k = 0; k < g.rows.size(); ++k)
    for (int64_t j = 0; j < 3; ++j)
      check_close(g.values[static_cast<int64_t>(k) * 3 + j],
                  numeric_grad(&emb.table()[g.rows[k] * 3 + j], f),
                  "row " + std::to_string(g.rows[k]));
  auto bad = emb.forward({3, 10}, Shape{2});
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.error().message, Catch::Contains("id 10"));
}

TEST_CASE("A whole MLP with its loss passes a gradient check", "[layers]") {
  auto model = make_mlp({6, 5, 4, 3}, 23);
  SoftmaxCrossEntropy ce;
  Tensor x = random_tensor(Shape{4, 6}, 24);
  const int32_t labels[] = {0, 2, 1, 2};
  auto f = [&] { return static_cast<double>(ce.forward(model->forward(x), labels).value()); };
  f();
  model->backward(ce.backward());
  auto params = model->parameters();
  REQUIRE(params.size() == 6);
  std::vector<Tensor> grads;
  for (auto& p : params)
    grads.push_back(Tensor::from_view(*p.grad));
  // Some hidden ReLU input may sit within a step of 0; there the two step sizes disagree and
  // the coordinate is skipped. Only a few may be.
  int checked = 0, kinks = 0;
  for (size_t k = 0; k < params.size(); ++k)
    for (int64_t i = 0; i < params[k].value->size(); i += 3) {
      const double coarse = numeric_grad(&(*params[k].value)[i], f, 1e-2f);
      const double fine = numeric_grad(&(*params[k].value)[i], f, 2.5e-3f);
      if (std::fabs(coarse - fine) > 1e-2 * std::max(1.0, std::fabs(fine))) {
        ++kinks;
        continue;
      }
      ++checked;
      check_close(grads[k][i], coarse, params[k].name);
    }
  CHECK(kinks <= checked / 10);
  CHECK(model->num_parameters() == 6 * 5 + 5 + 5 * 4 + 4 + 4 * 3 + 3);
}

// The fused layer runs other code (oneDNN's ReLU post-op; one pass making the masked
// gradient, its bfloat16 copy and the bias' gradient) on the products' same operands: its
// outputs and product gradients are the separate layers' bit for bit, the bias' gradient
// sums in another order.
TEST_CASE("A Dense with a ReLU activation computes what Dense then ReLU do", "[layers]") {
  const bool onednn = GENERATE(true, false);
  const int threads = GENERATE(1, 2);
  const auto precision = GENERATE(Precision::float32, Precision::mixed_bfloat16);
  CAPTURE(onednn, threads, precision_name(precision));
  if (precision == Precision::mixed_bfloat16 && !CpuBackend().supports(precision).ok()) return;
  cpu::set_gemm_enabled(onednn);
  set_intra_op_threads(threads);
  Sequential fused, separate;
  auto& a = fused.emplace<Dense>("dense", 33, 47, 5, Activation::relu);
  auto& b = separate.emplace<Dense>("dense", 33, 47, 5);
  separate.emplace<ReLU>();
  a.bias() = random_tensor(Shape{47}, 6);  // some outputs on each side of 0
  b.bias() = a.bias();
  a.set_input_grad(true);
  b.set_input_grad(true);
  REQUIRE(fused.to(Device::cpu(), precision).ok());
  REQUIRE(separate.to(Device::cpu(), precision).ok());
  const Tensor x = random_tensor(Shape{70, 33}, 7);
  const Tensor dy = random_tensor(Shape{70, 47}, 8);
  const Tensor y1 = Tensor::from_view(fused.forward(x));
  const Tensor y2 = Tensor::from_view(separate.forward(x));
  int64_t zeros = 0;
  for (int64_t i = 0; i < y1.size(); ++i)
    zeros += y1[i] == 0.0f;
  CHECK(zeros > y1.size() / 5);
  CHECK(zeros < y1.size() * 4 / 5);
  CHECK(max_abs_diff(y1, y2) == 0.0f);
  const Tensor dx1 = Tensor::from_view(fused.backward(dy));
  const Tensor dx2 = Tensor::from_view(separate.backward(dy));
  CHECK(max_abs_diff(dx1, dx2) == 0.0f);
  const auto p1 = fused.parameters(), p2 = separate.parameters();
  REQUIRE(p1.size() == 2);
  CHECK(max_abs_diff(*p1[0].grad, *p2[0].grad) == 0.0f);  // the kernel's
  float scale = 0.0f;
  for (int64_t i = 0; i < p2[1].grad->size(); ++i)
    scale = std::max(scale, std::fabs((*p2[1].grad)[i]));
  CHECK(max_abs_diff(*p1[1].grad, *p2[1].grad) <= 1e-5f * std::max(1.0f, scale));
  cpu::set_gemm_enabled(true);
  set_intra_op_threads(1);
}

TEST_CASE("The tutorial CNN has the tutorial's shapes", "[layers]") {
  auto cnn = make_cnn(25);
  Tensor x = random_tensor(Shape{2, 784}, 26, 0.0f, 1.0f);
  CHECK(cnn->forward(x).shape() == (Shape{2, 10}));
  CHECK(cnn->num_parameters() == (9 * 32 + 32) + (21632 * 128 + 128) + (128 * 10 + 10));
}

TEST_CASE("An input of another shape is an error naming the layer, not an abort", "[layers]") {
  auto mlp = make_mlp({784, 16, 10}, 1);
  CHECK(mlp->check_input(Shape{32, 784}).ok());
  auto bad = mlp->check_input(Shape{32, 756});  // 27x28 images
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().code == Errc::invalid_argument);
  CHECK_THAT(bad.error().message, Catch::Contains("784") && Catch::Contains("756"));
  auto cnn = make_cnn(2);
  CHECK(cnn->check_input(Shape{8, 784}).ok());
  CHECK_FALSE(cnn->check_input(Shape{8, 756}).ok());
  // The trainer checks before its forward pass.
  auto sgd = make_optimizer("sgd", 0.1f).value();
  ClassifierTrainer t(*mlp, *sgd);
  Tensor x(Shape{2, 756}, 0.5f);
  const int32_t labels[2] = {1, 2};
  auto loss = t.compute_gradients(x, labels);
  REQUIRE_FALSE(loss.ok());
  CHECK(loss.error().code == Errc::invalid_argument);
}

TEST_CASE("compute_gradients reports each gradient once, as soon as it is final, last first",
          "[layers]") {
  auto mlp = make_mlp({6, 5, 4, 3}, 7);
  auto sgd = make_optimizer("sgd", 0.1f).value();
  ClassifierTrainer t(*mlp, *sgd);
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
  CHECK(order == std::vector<size_t>{5, 4, 3, 2, 1, 0});
  CHECK(first_layer_pending_at_first_report);
}
