// GPU benchmarks of the CUDA backend, each against a baseline measured in the same run:
//   copy        host<->device through the backend's pinned staging, and from its pinned
//               host memory, against cudaMemcpy between pinned memory and the device (peak)
//   dense       a Dense layer's forward + backward (three GEMMs, bias, bias gradient)
//               through the backend against the three GEMMs by cuBLAS alone
//   gemm_peak   the GPU's measured GEMM throughput per precision (cuBLAS, 8192^3)
//   train_step  the MLP and the tutorial CNN (a training step) and DeepFM 400-400-400
//               (forward + backward) per precision and batch; DeepFM's fraction of the
//               GEMM peak of its precision
// One JSON line per figure (medians of --runs), then a summary line. Without a GPU it
// prints one line saying so and exits 0: nothing is measured, nothing is made up.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <chrono>
#include <functional>
#include <iostream>
#include <random>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "bench_stats.hpp"
#include "classifier_batch.hpp"
#include "core/json_text.hpp"
#include "core/keras/classifier_graph.hpp"
#include "core/keras/classifier_trainer.hpp"
#include "core/keras/ctr_graph.hpp"
#include "core/nn/ctr_model.hpp"
#include "core/nn/losses.hpp"
#include "core/partitioner.hpp"
#include "deepfm_step.hpp"
#include "examples/command_line.hpp"
#include "gpu/cuda.hpp"
#include "gpu/cuda_devices.hpp"

namespace tc = troupe::core;
using troupe::bench::median;
using json = nlohmann::json;

namespace {

const tc::Device gpu0 = tc::Device::cuda(0);

tc::Backend& backend() {
  return *tc::backend_for(gpu0).value();
}

// Seconds per call of `fn` (run until `seconds` have passed, at least 3 calls), the GPU
// synchronized before the clock stops; the median of `runs` such windows.
double seconds_per_call(const std::function<void()>& fn, int runs, double seconds) {
  fn();
  (void)backend().synchronize();
  std::vector<double> per;
  for (int r = 0; r < runs; ++r) {
    int64_t calls = 0;
    const auto t0 = std::chrono::steady_clock::now();
    double elapsed = 0.0;
    while (elapsed < seconds || calls < 3) {
      fn();
      ++calls;
      if (calls % 8 == 0 || elapsed + 0.01 > seconds) {
        (void)backend().synchronize();
        elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      }
    }
    (void)backend().synchronize();
    elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    per.push_back(elapsed / static_cast<double>(calls));
  }
  return median(per);
}

tc::Tensor random_on_gpu(tc::Shape shape, uint64_t seed, float scale = 1.0f) {
  return tc::initialize(shape, {tc::Initializer::Kind::random_uniform, scale, seed}).to(gpu0);
}

json copy_bench(int runs, double seconds) {
  const size_t bytes = size_t{64} << 20;
  std::vector<char> pageable(bytes, 1);
  auto pinned = backend().allocate_host(bytes);
  void* device = nullptr;
  cudaMalloc(&device, bytes);
  cudaStream_t s = static_cast<cudaStream_t>(backend().native_stream());
  auto gbps = [&](double sec) { return static_cast<double>(bytes) / sec / 1e9; };
  const double staged_h2d = gbps(seconds_per_call(
      [&] { backend().copy(device, gpu0, pageable.data(), tc::Device::cpu(), bytes); }, runs,
      seconds));
  const double staged_d2h = gbps(seconds_per_call(
      [&] { backend().copy(pageable.data(), tc::Device::cpu(), device, gpu0, bytes); }, runs,
      seconds));
  const double pinned_h2d = gbps(seconds_per_call(
      [&] { backend().copy(device, gpu0, pinned.get(), tc::Device::cpu(), bytes); }, runs,
      seconds));
  const double peak_h2d = gbps(seconds_per_call(
      [&] { cudaMemcpyAsync(device, pinned.get(), bytes, cudaMemcpyHostToDevice, s); }, runs,
      seconds));
  const double peak_d2h = gbps(seconds_per_call(
      [&] { cudaMemcpyAsync(pinned.get(), device, bytes, cudaMemcpyDeviceToHost, s); }, runs,
      seconds));
  cudaFree(device);
  return {{"bench", "gpu_copy"},
          {"bytes", bytes},
          {"staged_h2d_gbps", staged_h2d},
          {"staged_d2h_gbps", staged_d2h},
          {"pinned_h2d_gbps", pinned_h2d},
          {"cudamemcpy_h2d_gbps", peak_h2d},
          {"cudamemcpy_d2h_gbps", peak_d2h},
          {"staged_h2d_vs_peak", staged_h2d / peak_h2d},
          {"staged_d2h_vs_peak", staged_d2h / peak_d2h},
          {"pinned_h2d_vs_peak", pinned_h2d / peak_h2d}};
}

// cuBLAS alone: C (m x n, column-major) = op(A) op(B) in the precision's types.
struct Cublas {
  cublasHandle_t h = nullptr;
  Cublas() {
    cublasCreate(&h);
    cublasSetStream(h, static_cast<cudaStream_t>(backend().native_stream()));
  }
  ~Cublas() { cublasDestroy(h); }
  void gemm(bool ta, bool tb, int m, int n, int k, const void* a, int lda, const void* b, int ldb,
            float* c, int ldc, tc::Precision p) {
    const float one = 1.0f, zero = 0.0f;
    const cudaDataType_t in = p == tc::Precision::mixed_bfloat16  ? CUDA_R_16BF
                              : p == tc::Precision::mixed_float16 ? CUDA_R_16F
                                                                  : CUDA_R_32F;
    const cublasComputeType_t compute =
        p == tc::Precision::tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    cublasGemmEx(h, ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k, &one,
                 a, in, lda, b, in, ldb, &zero, c, CUDA_R_32F, ldc, compute, CUBLAS_GEMM_DEFAULT);
  }
};

double gemm_peak_tflops(Cublas& cb, tc::Precision p, int runs, double seconds) {
  const int n = 8192;
  void *a = nullptr, *b = nullptr, *c = nullptr;
  cudaMalloc(&a, size_t{4} * n * n);
  cudaMalloc(&b, size_t{4} * n * n);
  cudaMalloc(&c, size_t{4} * n * n);
  cudaMemset(a, 0, size_t{4} * n * n);
  cudaMemset(b, 0, size_t{4} * n * n);
  const double sec = seconds_per_call(
      [&] { cb.gemm(false, false, n, n, n, a, n, b, n, static_cast<float*>(c), n, p); }, runs,
      seconds);
  cudaFree(a);
  cudaFree(b);
  cudaFree(c);
  return 2.0 * n * n * static_cast<double>(n) / sec / 1e12;
}

// BatchNormalization over [rows, channels] in training (its batch moments, the forward,
// the backward with gamma's and beta's gradients), and the device-to-device copy of the
// same tensor for scale: the pass reads x five times (moments twice, the forward, the
// backward's sums and its dx) and dy twice, and writes y and dx: 9 tensors of traffic.
json norm_bench(int64_t rows, int64_t channels, int runs, double seconds) {
  auto& be = backend();
  const tc::Shape shape{rows, channels};
  tc::Tensor x = random_on_gpu(shape, 1), dy = random_on_gpu(shape, 2);
  tc::Tensor gamma = random_on_gpu(tc::Shape{channels}, 3),
             beta = random_on_gpu(tc::Shape{channels}, 4);
  tc::Tensor y(shape, tc::DType::float32, gpu0), dx(shape, tc::DType::float32, gpu0);
  tc::Tensor mean(tc::Shape{channels}, tc::DType::float32, gpu0),
      var(tc::Shape{channels}, tc::DType::float32, gpu0),
      dgamma(tc::Shape{channels}, tc::DType::float32, gpu0),
      dbeta(tc::Shape{channels}, tc::DType::float32, gpu0);
  const double s = seconds_per_call(
      [&] {
        be.moments(x, mean, var);
        be.batch_norm_forward(x, mean, var, gamma, beta, 1e-3f, y);
        be.batch_norm_backward(x, mean, var, gamma, 1e-3f, true, dy, dx, dgamma, dbeta);
      },
      runs, seconds);
  const double bytes = static_cast<double>(x.size()) * sizeof(float);
  const double copy = seconds_per_call(
      [&] { be.copy(y.data(), gpu0, x.data(), gpu0, static_cast<size_t>(bytes)); }, runs, seconds);
  return {{"bench", "gpu_batch_norm"},
          {"shape", {rows, channels}},
          {"troupe_us", s * 1e6},
          {"copy_us", copy * 1e6},
          {"gbps", 9.0 * bytes / s / 1e9},
          {"vs_copy_bandwidth", (9.0 * bytes / s) / (2.0 * bytes / copy)}};
}

json dense_bench(Cublas& cb, int64_t n, int64_t in, int64_t out, tc::Precision p, int runs,
                 double seconds) {
  const auto x = random_on_gpu(tc::Shape{n, in}, 1), w = random_on_gpu(tc::Shape{in, out}, 2, 0.1f),
             b = random_on_gpu(tc::Shape{out}, 3), dy = random_on_gpu(tc::Shape{n, out}, 4);
  tc::Tensor y(tc::Shape{n, out}, tc::DType::float32, gpu0),
      dw(w.shape(), tc::DType::float32, gpu0), db(b.shape(), tc::DType::float32, gpu0),
      dx(x.shape(), tc::DType::float32, gpu0);
  const double troupe = seconds_per_call(
      [&] {
        backend().dense_forward(x, w, b, y, p);
        backend().dense_backward(x, w, dy, dw, db, dx, p);
      },
      runs, seconds);
  // The same three products by cuBLAS, operands already in the policy's type.
  const bool half = p == tc::Precision::mixed_bfloat16 || p == tc::Precision::mixed_float16;
  tc::Tensor xh = x, wh = w, dyh = dy;
  if (half) {
    const auto t = tc::compute_dtype(p);
    xh = tc::Tensor(x.shape(), t, gpu0);
    wh = tc::Tensor(w.shape(), t, gpu0);
    dyh = tc::Tensor(dy.shape(), t, gpu0);
    backend().convert(x, xh);
    backend().convert(w, wh);
    backend().convert(dy, dyh);
  }
  const int N = static_cast<int>(n), I = static_cast<int>(in), O = static_cast<int>(out);
  const double cublas = seconds_per_call(
      [&] {
        cb.gemm(false, false, O, N, I, wh.data(), O, xh.data(), I, y.data(), O, p);
        cb.gemm(false, true, O, I, N, dyh.data(), O, xh.data(), I, dw.data(), O, p);
        cb.gemm(true, false, I, N, O, wh.data(), O, dyh.data(), O, dx.data(), I, p);
      },
      runs, seconds);
  const double flops =
      6.0 * static_cast<double>(n) * static_cast<double>(in) * static_cast<double>(out);
  return {{"bench", "gpu_dense"},
          {"shape", {n, in, out}},
          {"precision", tc::precision_name(p)},
          {"troupe_us", troupe * 1e6},
          {"cublas_us", cublas * 1e6},
          {"troupe_tflops", flops / troupe / 1e12},
          {"vs_cublas", cublas / troupe}};
}

json classifier_step(const std::string& name, int batch, tc::Precision p, int runs,
                     double seconds) {
  auto model = tc::keras::make_classifier(name, 1).value();  // as fmnist_local trains it
  (void)model->to(gpu0, p);
  auto opt = tc::make_optimizer(name == "mlp" ? "sgd" : "rmsprop", 0.01f).value();
  tc::keras::ClassifierTrainer trainer(*model, *opt);
  const troupe::bench::ClassifierBatch data = troupe::bench::classifier_batch(batch);
  const tc::Tensor& x = data.x;
  const std::vector<int32_t>& labels = data.labels;
  const double sec =
      seconds_per_call([&] { (void)trainer.train_step(x, labels.data()); }, runs, seconds);
  return {{"bench", "gpu_train_step"},
          {"model", name},
          {"batch", batch},
          {"precision", tc::precision_name(p)},
          {"examples_per_sec", batch / sec}};
}

json deepfm_step(int batch, tc::Precision p, double peak_tflops, int runs, double seconds,
                 bool profile) {
  troupe::bench::DeepfmStep step(batch, gpu0, p);
  const tc::CtrModelConfig& cfg = step.config();
  const double sec = seconds_per_call([&] { step.run(); }, runs, seconds);
  // The MLP's products dominate: 2 FLOPs per multiply-add, three products per layer.
  int64_t macs = 0, in = cfg.fields * cfg.dim + cfg.dense;
  for (int64_t h : cfg.hidden) {
    macs += in * h;
    in = h;
  }
  macs += in;
  const double flops = 6.0 * static_cast<double>(macs) * batch;
  const double tflops = flops / sec / 1e12;
  return {{"bench", "gpu_train_step"},
          {"model", "deepfm"},
          {"batch", batch},
          {"precision", tc::precision_name(p)},
          {"examples_per_sec", batch / sec},
          {"mlp_tflops", tflops},
          {"fraction_of_gemm_peak", peak_tflops > 0 ? tflops / peak_tflops : 0.0},
          {"profile", profile ? step.profile(5) : json()}};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"GPU benchmarks of the CUDA backend"};
  int runs = 5;
  double seconds = 0.5;
  std::vector<int> deepfm_batches{1024, 4096, 16384};
  std::vector<std::string> precisions{"float32", "tf32", "mixed_bfloat16"};
  app.add_option("--runs", runs)->check(CLI::PositiveNumber);
  app.add_option("--seconds", seconds, "minimum seconds per timed window");
  app.add_option("--deepfm-batches", deepfm_batches);
  app.add_option("--precisions", precisions);
  bool profile = false;
  app.add_flag("--profile", profile,
               "time each part of a DeepFM step and each layer call (the device synchronized "
               "after each) into the step's line");
  if (auto end = troupe::examples::parse_command_line(app, argc, argv, "bench_gpu")) return *end;

  troupe::gpu::register_cuda_devices();
  if (troupe::gpu::device_count() == 0) {
    auto d = tc::select_device(tc::parse_device("cuda:0").value(), 0);
    std::cout << tc::json_text({{"bench", "gpu_summary"},
                                {"skipped", true},
                                {"reason", d ? "no GPU" : d.error().message}})
              << std::endl;
    return 0;
  }
  json summary{{"bench", "gpu_summary"}, {"device", backend().name()}, {"results", json::array()}};
  auto emit = [&](const json& j) {
    std::cout << tc::json_text(j) << std::endl;
    summary["results"].push_back(j);
  };
  emit(copy_bench(runs, seconds));
  for (auto [rows, channels] : {std::pair<int64_t, int64_t>{128 * 28 * 28, 32}, {4096, 512}})
    emit(norm_bench(rows, channels, runs, seconds));
  Cublas cb;
  std::map<std::string, double> peak;
  for (const auto& name : precisions) {
    auto p = tc::parse_precision(name);
    if (!p) {
      std::cerr << "bench_gpu: " << p.error().message << std::endl;
      return 1;
    }
    peak[name] = gemm_peak_tflops(cb, *p, runs, seconds);
    emit({{"bench", "gpu_gemm_peak"}, {"precision", name}, {"tflops", peak[name]}});
    for (auto [n, in, out] : {std::tuple<int64_t, int64_t, int64_t>{128, 784, 128},
                              {1024, 400, 400},
                              {16384, 400, 400}})
      emit(dense_bench(cb, n, in, out, *p, runs, seconds));
    emit(classifier_step("mlp", 128, *p, runs, seconds));
    emit(classifier_step("cnn", 128, *p, runs, seconds));
    for (int b : deepfm_batches)
      emit(deepfm_step(b, *p, peak[name], runs, seconds, profile));
  }
  if (auto st = backend().synchronize(); !st) {
    summary["error"] = st.error().message;
    std::cout << tc::json_text(summary) << std::endl;
    return 1;
  }
  std::cout << tc::json_text(summary) << std::endl;
  return 0;
}
