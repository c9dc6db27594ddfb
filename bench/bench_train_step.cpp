// Micro-benchmark of one training step (forward + backward + optimizer update) per model and
// batch size, single-threaded, on synthetic data. Prints one JSON line per configuration
// with the median over several runs, and a final JSON summary line.
#include <algorithm>
#include <chrono>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "bench_stats.hpp"

#include "core/json_text.hpp"
#include "core/partitioner.hpp"
#include "core/trainer.hpp"

namespace tc = troupe::core;

namespace {

using troupe::bench::median;

nlohmann::json bench_one(const std::string& model_name, int batch, int runs,
                         double seconds_per_run) {
  auto model = tc::make_model(model_name, 1).value();
  auto opt = tc::make_optimizer(model_name == "mlp" ? "sgd" : "rmsprop",
                                model_name == "mlp" ? 0.1f : 0.001f)
                 .value();
  tc::ClassifierTrainer trainer(*model, *opt);
  const tc::Tensor x =
      tc::initialize(tc::Shape{batch, 784}, {tc::Initializer::Kind::random_normal, 0.3f, 7});
  std::vector<int32_t> labels(static_cast<size_t>(batch));
  for (int i = 0; i < batch; ++i)
    labels[static_cast<size_t>(i)] = i % 10;

  using clock = std::chrono::steady_clock;
  for (int i = 0; i < 3; ++i)
    (void)trainer.train_step(x, labels.data());  // warm-up
  std::vector<double> rates;
  int64_t steps_total = 0;
  for (int r = 0; r < runs; ++r) {
    int64_t steps = 0;
    const auto t0 = clock::now();
    double elapsed = 0.0;
    while (elapsed < seconds_per_run || steps < 3) {
      if (!trainer.train_step(x, labels.data())) return {{"error", "train_step failed"}};
      ++steps;
      elapsed = std::chrono::duration<double>(clock::now() - t0).count();
    }
    steps_total += steps;
    rates.push_back(static_cast<double>(steps) * batch / elapsed);
  }
  return {{"bench", "train_step"},
          {"model", model_name},
          {"batch", batch},
          {"threads", 1},
          {"runs", runs},
          {"steps", steps_total},
          {"examples_per_sec_median", median(rates)},
          {"examples_per_sec_min", *std::min_element(rates.begin(), rates.end())},
          {"examples_per_sec_max", *std::max_element(rates.begin(), rates.end())}};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Training-step micro-benchmark"};
  std::vector<std::string> models{"mlp", "cnn"};
  std::vector<int> batches{32, 128, 512};
  int runs = 5;
  double seconds = 0.5;
  app.add_option("--models", models);
  app.add_option("--batches", batches);
  app.add_option("--runs", runs)->check(CLI::PositiveNumber);
  app.add_option("--seconds", seconds, "minimum seconds per run (doubled for the CNN)");
  CLI11_PARSE(app, argc, argv);

  nlohmann::json summary{{"bench", "train_step_summary"}, {"results", nlohmann::json::array()}};
  for (const auto& m : models)
    for (int b : batches) {
      auto j = bench_one(m, b, runs, m == "cnn" ? 2 * seconds : seconds);
      std::cout << troupe::core::json_text(j) << std::endl;
      summary["results"].push_back(
          {{"model", m},
           {"batch", b},
           {"examples_per_sec_median", j.value("examples_per_sec_median", 0.0)}});
    }
  std::cout << troupe::core::json_text(summary) << std::endl;
  return 0;
}
