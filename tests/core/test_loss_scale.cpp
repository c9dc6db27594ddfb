// Dynamic loss scaling (Keras' LossScaleOptimizer) and the trainer under mixed_float16:
// steps whose float16 gradients overflow are skipped and leave the weights alone, the
// scale halves until gradients fit, grows after a run of good steps, and training goes on.
#include <catch2/catch.hpp>

#include <cmath>

#include "core/keras/classifier_graph.hpp"
#include "core/keras/classifier_trainer.hpp"
#include "core/loss_scale.hpp"
#include "helpers.hpp"

using namespace troupe::core;
using troupe::test::random_tensor;

TEST_CASE("the loss scale halves on a bad step, never below 1, and doubles after good ones",
          "[loss_scale]") {
  LossScale ls(LossScaleOptions{8.0f, 3, 2.0f});
  CHECK(ls.scale() == 8.0f);
  CHECK_FALSE(ls.update(false));
  CHECK(ls.scale() == 4.0f);
  CHECK(ls.update(true));
  CHECK(ls.update(true));
  CHECK(ls.scale() == 4.0f);
  CHECK(ls.update(true));  // the third good step in a row
  CHECK(ls.scale() == 8.0f);
  CHECK(ls.update(true));
  CHECK(ls.update(true));
  CHECK_FALSE(ls.update(false));  // a bad step resets the run
  CHECK(ls.scale() == 4.0f);
  CHECK(ls.update(true));
  CHECK(ls.update(true));
  CHECK(ls.scale() == 4.0f);
  for (int i = 0; i < 10; ++i)
    ls.update(false);
  CHECK(ls.scale() == 1.0f);
  CHECK(ls.skipped_steps() == 12);
}

TEST_CASE("mixed_float16 training skips overflowing steps, finds a scale, and learns",
          "[loss_scale]") {
  // At a scale of 2^24 the scaled gradient of the logits, (p - y) / 32 * scale, is past
  // float16's 65504: its products overflow until the scale has come down a few times.
  const Tensor x = random_tensor(Shape{32, 784}, 3, -1.0f, 1.0f);
  std::vector<int32_t> y(32);
  for (size_t i = 0; i < y.size(); ++i)
    y[i] = static_cast<int32_t>(i % 10);

  auto model = keras::ClassifierGraph::make({false, {784, 32, 10}, 5, true}).value();
  REQUIRE(model->to(Device::cpu(), Precision::mixed_float16).ok());
  auto sgd = make_optimizer("sgd", 0.01f).value();
  keras::ClassifierTrainer trainer(*model, *sgd, LossScaleOptions{16777216.0f, 1000, 2.0f});
  REQUIRE(trainer.loss_scale() != nullptr);

  // The first step's gradients are not finite: nothing is applied.
  const Tensor before = *trainer.parameters()[0].value;
  const float first = trainer.train_step(x, y.data()).value();
  CHECK(std::isfinite(first));
  CHECK(trainer.loss_scale()->skipped_steps() == 1);
  CHECK(trainer.loss_scale()->scale() == 8388608.0f);
  CHECK(max_abs_diff(before, *trainer.parameters()[0].value) == 0.0f);

  float last = first;
  for (int s = 0; s < 60; ++s)
    last = trainer.train_step(x, y.data()).value();
  const int64_t skipped = trainer.loss_scale()->skipped_steps();
  CHECK(skipped > 1);   // it took a few halvings to fit
  CHECK(skipped < 20);  // and then the steps were applied
  CHECK(last < first);  // it learned
  CHECK(max_abs_diff(before, *trainer.parameters()[0].value) > 0.0f);
}

TEST_CASE("applied steps are unscaled: mixed_float16 moves weights as float32 does",
          "[loss_scale]") {
  // One step from the same start at a scale that fits: the update equals float32's up to
  // float16's rounding of the operands, not `scale` times it.
  const Tensor x = random_tensor(Shape{8, 784}, 4, -0.5f, 0.5f);
  std::vector<int32_t> y(8, 2);
  std::vector<Tensor> moved;
  for (Precision p : {Precision::float32, Precision::mixed_float16}) {
    auto model = keras::ClassifierGraph::make({false, {784, 16, 10}, 7, true}).value();
    REQUIRE(model->to(Device::cpu(), p).ok());
    auto sgd = make_optimizer("sgd", 0.5f).value();
    keras::ClassifierTrainer trainer(*model, *sgd, LossScaleOptions{1024.0f, 1000, 2.0f});
    const Tensor before = *trainer.parameters()[2].value;
    REQUIRE(trainer.train_step(x, y.data()).ok());
    Tensor delta = *trainer.parameters()[2].value;
    delta.matrix() -= before.matrix();
    moved.push_back(delta);
    if (trainer.loss_scale()) CHECK(trainer.loss_scale()->skipped_steps() == 0);
  }
  const float largest = moved[0].matrix().cwiseAbs().maxCoeff();
  REQUIRE(largest > 1e-3f);
  CHECK(max_abs_diff(moved[0], moved[1]) < 0.01f * largest);
}

TEST_CASE("float32 and mixed_bfloat16 training do not scale the loss", "[loss_scale]") {
  for (Precision p : {Precision::float32, Precision::mixed_bfloat16}) {
    auto model = keras::ClassifierGraph::make({false, {784, 16, 10}, 5, true}).value();
    REQUIRE(model->to(Device::cpu(), p).ok());
    auto sgd = make_optimizer("sgd", 0.1f).value();
    keras::ClassifierTrainer trainer(*model, *sgd);
    CHECK(trainer.loss_scale() == nullptr);
    const Tensor x = random_tensor(Shape{16, 784}, 3);
    std::vector<int32_t> y(16, 3);
    const float first = trainer.train_step(x, y.data()).value();
    float last = first;
    for (int s = 0; s < 10; ++s)
      last = trainer.train_step(x, y.data()).value();
    CHECK(last < first);
  }
}
