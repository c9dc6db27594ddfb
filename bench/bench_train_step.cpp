// Micro-benchmark of one training step (forward + backward + optimizer update) per model,
// batch size and precision policy, on synthetic data, with this core's measured peak
// (bench/cpu_peak.hpp) and each step's share of it: the FLOPs of its matrix products
// (counted by the CPU backend) per second, over the peak of the threads it ran on. Prints
// one JSON line per configuration with the median over several runs, and a final JSON
// summary line.
#include <algorithm>
#include <chrono>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "bench_stats.hpp"
#include "classifier_batch.hpp"
#include "cpu_peak.hpp"
#include "deepfm_step.hpp"

#include "core/cpu/cpu_backend.hpp"
#include "core/cpu/gemm.hpp"
#include "core/cpu_features.hpp"
#include "core/json_text.hpp"
#include "core/keras/classifier_graph.hpp"
#include "core/keras/classifier_trainer.hpp"
#include "core/keras/ctr_graph.hpp"
#include "core/nn/ctr_model.hpp"
#include "core/nn/losses.hpp"
#include "core/parallel.hpp"
#include "core/partitioner.hpp"
#include "examples/command_line.hpp"

namespace tc = troupe::core;

namespace {

using troupe::bench::median;

// This core's peak, GFLOP/s, per policy (what its matrix products multiply in).
struct Peak {
  double f32 = 0.0, bf16 = 0.0;
  double of(tc::Precision p) const {
    return p == tc::Precision::mixed_bfloat16 && tc::cpu::gemm_supports(tc::DType::bfloat16) ? bf16
                                                                                             : f32;
  }
};

// The matrix-product FLOPs of one call of `step`.
template <class Step>
double flops_of(Step step) {
  const uint64_t before = tc::cpu_product_flops();
  step();
  return static_cast<double>(tc::cpu_product_flops() - before);
}

// A step's efficiency fields: its products' GFLOP/s and their share of `threads` cores' peak.
void add_efficiency(nlohmann::json& j, double step_flops, double steps_per_sec, double peak,
                    int threads) {
  const double gflops = step_flops * steps_per_sec / 1e9;
  j["matmul_gflop_per_step"] = step_flops / 1e9;
  j["matmul_gflops"] = gflops;
  j["peak_gflops"] = peak * threads;
  j["peak_fraction"] = peak > 0 ? gflops / (peak * threads) : 0.0;
}

// One training step of a built-in classifier as the programs train it (its Keras form's
// layer graph, core::keras::ClassifierGraph): examples/s over `runs` runs, their median.
nlohmann::json bench_one(const std::string& model_name, int batch, int runs, double seconds_per_run,
                         tc::Precision precision, const Peak& peak) {
  auto graph = tc::keras::make_classifier(model_name, 1);
  if (!graph) return {{"error", "unknown model " + model_name}};
  (void)(*graph)->to(tc::Device::cpu(), precision);
  auto optimizer = tc::make_optimizer(model_name == "mlp" ? "sgd" : "rmsprop",
                                      model_name == "mlp" ? 0.1f : 0.001f)
                       .value();
  tc::keras::ClassifierTrainer trainer(**graph, *optimizer);
  const troupe::bench::ClassifierBatch data = troupe::bench::classifier_batch(batch);
  const tc::Tensor& x = data.x;
  const std::vector<int32_t>& labels = data.labels;

  using clock = std::chrono::steady_clock;
  for (int i = 0; i < 3; ++i)
    (void)trainer.train_step(x, labels.data());  // warm-up
  const double step_flops = flops_of([&] { (void)trainer.train_step(x, labels.data()); });
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
  nlohmann::json j{{"bench", "train_step"},
                   {"model", model_name},
                   {"engine", "graph"},
                   {"batch", batch},
                   {"precision", tc::precision_name(precision)},
                   {"threads", 1},
                   {"runs", runs},
                   {"steps", steps_total},
                   {"examples_per_sec_median", median(rates)},
                   {"examples_per_sec_min", *std::min_element(rates.begin(), rates.end())},
                   {"examples_per_sec_max", *std::max_element(rates.begin(), rates.end())}};
  add_efficiency(j, step_flops, median(rates) / batch, peak.of(precision), 1);
  return j;
}

// Examples/s of `step` (a batch of `batch` examples each) after one warm-up step, over at
// least `seconds` and 3 steps.
template <class Step>
double examples_per_sec(Step& step, int batch, double seconds) {
  using clock = std::chrono::steady_clock;
  step();
  int64_t steps = 0;
  const auto t0 = clock::now();
  double elapsed = 0.0;
  while (elapsed < seconds || steps < 3) {
    step();
    ++steps;
    elapsed = std::chrono::duration<double>(clock::now() - t0).count();
  }
  return static_cast<double>(steps) * batch / elapsed;
}

// DeepFM (26 fields, 13 dense, dim 16, DNN 400-400-400) as ctr_ps's workers compute it
// (its Keras form's layer graph, core::keras::CtrGraph: the batch fed, its rows given,
// forward, loss, backward, the gradients on the host in the variables' layout) on one
// synthetic batch, with each intra-op thread count in turn within every run (so machine
// noise hits them alike); one JSON line per thread count and the speed-up of the last over
// the first.
std::vector<nlohmann::json> bench_ctr(int batch, const std::vector<int>& threads, int runs,
                                      double seconds_per_run, tc::Precision precision,
                                      const Peak& peak, bool profile) {
  troupe::bench::DeepfmStep deepfm(batch, tc::Device::cpu(), precision);
  auto step = [&] { deepfm.run(); };
  step();
  const double step_flops = flops_of(step);
  std::vector<std::vector<double>> rates(threads.size());
  for (int r = 0; r < runs; ++r)
    for (size_t t = 0; t < threads.size(); ++t) {
      tc::set_intra_op_threads(threads[t]);  // the warm-up step starts the pool's threads
      rates[t].push_back(examples_per_sec(step, batch, seconds_per_run));
    }
  tc::set_intra_op_threads(1);
  std::vector<nlohmann::json> out;
  for (size_t t = 0; t < threads.size(); ++t) {
    nlohmann::json j{{"bench", "train_step"},
                     {"model", "deepfm"},
                     {"batch", batch},
                     {"precision", tc::precision_name(precision)},
                     {"threads", threads[t]},
                     {"runs", runs},
                     {"examples_per_sec_median", median(rates[t])},
                     {"speedup_vs_first", median(rates[t]) / median(rates[0])}};
    add_efficiency(j, step_flops, median(rates[t]) / batch, peak.of(precision), threads[t]);
    if (profile) {
      tc::set_intra_op_threads(threads[t]);
      j["profile"] = deepfm.profile(5);
      tc::set_intra_op_threads(1);
    }
    out.push_back(j);
  }
  return out;
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
  std::vector<int> ctr_batches;
  std::vector<int> threads{1, 2};
  app.add_option("--deepfm-batches", ctr_batches,
                 "also DeepFM steps at these batches, with each --threads count in turn");
  app.add_option("--threads", threads, "intra-op thread counts for --deepfm-batches");
  bool profile = false;
  app.add_flag("--profile", profile,
               "time each part of a DeepFM step and each layer call into the step's line");
  std::vector<std::string> precisions{"float32"};
  app.add_option("--precisions", precisions,
                 "policies of every step (mixed_bfloat16: bf16 products where the CPU has "
                 "AVX512_BF16; the others: the CPU's rounding reference)");
  std::vector<std::string> engines{"onednn"};
  app.add_option("--matmul", engines,
                 "who computes the CPU's products, each in turn: onednn (where built in), "
                 "eigen (the baseline)")
      ->check(CLI::IsMember({"onednn", "eigen"}));
  if (auto end = troupe::examples::parse_command_line(app, argc, argv, "bench_train_step"))
    return *end;

  Peak peak;
  peak.f32 = troupe::bench::peak_f32_gflops(tc::cpu_has(tc::CpuFeature::avx512f),
                                            tc::cpu_has(tc::CpuFeature::avx2));
  peak.bf16 = troupe::bench::peak_bf16_gflops(tc::cpu_has(tc::CpuFeature::avx512_bf16));
  const nlohmann::json peak_line{{"bench", "cpu_peak"},
                                 {"f32_gflops_per_core", peak.f32},
                                 {"bf16_gflops_per_core", peak.bf16},
                                 {"cpu_features", tc::cpu_feature_names()},
                                 {"matmul_f32", tc::cpu::gemm_engine(tc::DType::float32)}};
  std::cout << troupe::core::json_text(peak_line) << std::endl;
  nlohmann::json summary{
      {"bench", "train_step_summary"}, {"peak", peak_line}, {"results", nlohmann::json::array()}};
  for (const auto& engine : engines)
    for (const auto& name : precisions) {
      tc::cpu::set_gemm_enabled(engine == "onednn");
      auto precision = tc::parse_precision(name);
      if (!precision) {
        std::cerr << "bench_train_step: " << precision.error().message << std::endl;
        return 1;
      }
      for (const auto& m : models)
        for (int b : batches) {
          auto j = bench_one(m, b, runs, m == "cnn" ? 2 * seconds : seconds, *precision, peak);
          j["matmul"] = engine;
          std::cout << troupe::core::json_text(j) << std::endl;
          summary["results"].push_back(
              {{"model", m},
               {"batch", b},
               {"matmul", engine},
               {"precision", name},
               {"examples_per_sec_median", j.value("examples_per_sec_median", 0.0)},
               {"peak_fraction", j.value("peak_fraction", 0.0)}});
        }
      for (int b : ctr_batches)
        for (auto& j : bench_ctr(b, threads, runs, seconds, *precision, peak, profile)) {
          j["matmul"] = engine;
          std::cout << troupe::core::json_text(j) << std::endl;
          summary["results"].push_back({{"model", "deepfm"},
                                        {"batch", b},
                                        {"matmul", engine},
                                        {"precision", name},
                                        {"threads", j["threads"]},
                                        {"examples_per_sec_median", j["examples_per_sec_median"]},
                                        {"peak_fraction", j["peak_fraction"]}});
        }
    }
  tc::cpu::set_gemm_enabled(true);
  summary["matmul_f32"] = tc::cpu::gemm_engine(tc::DType::float32);
  summary["matmul_bf16"] = tc::cpu::gemm_engine(tc::DType::bfloat16);
  std::cout << troupe::core::json_text(summary) << std::endl;
  return 0;
}
