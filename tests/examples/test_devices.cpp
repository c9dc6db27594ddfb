// --device and --precision through the shipped programs: a GPU the process does not have
// is refused with an error naming it (in one process, and from a PS job's workers at their
// first step), a misspelt value is named, and the mixed policies train on the CPU's
// reference path, report themselves, and land near float32's accuracy.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>

#include "helpers.hpp"
#include "run_program.hpp"

using troupe::test::run_program;

namespace {

using troupe::test::bin;

// `j` is the program's JSON line (or, under troupe launch, its chief's).
void refused(const troupe::test::ProgramRun& r, const std::string& device, bool launched = false) {
  INFO(r.output);
  CHECK(r.exit_code != 0);
  REQUIRE(r.last_json.is_object());
  const auto& j = launched ? r.last_json["chief"] : r.last_json;
  REQUIRE(j.is_object());
  CHECK(j["ok"] == false);
  CHECK(j["retryable"] == false);  // a restart would not find the GPU either
  CHECK_THAT(j["error"].get<std::string>(), Catch::Contains("device " + device));
}

}  // namespace

TEST_CASE("the programs refuse a GPU this machine does not have, naming it", "[example][device]") {
  troupe::test::TempDir dir;
  refused(run_program(bin + "/fmnist_local --max-steps 2 --device cuda:99 2>/dev/null"), "cuda:99");
  refused(run_program(bin + "/fmnist_mirrored --steps 2 --device cuda:99 2>/dev/null"), "cuda:99");
  refused(run_program(bin + "/fmnist_fit --epochs 1 --steps-per-epoch 2 --device cuda:99 " +
                      "--model-dir " + dir.path() + "/fit 2>/dev/null"),
          "cuda:99");
  // A PS job: the chief takes no device; each worker chooses its own at its first step and
  // the job fails with that worker's error.
  refused(
      run_program(bin + "/troupe launch --ps 1 --workers 1 --run-dir " + dir.path() + "/ps -- " +
                  bin + "/fmnist_ps --steps-per-worker 4 --device cuda:99 2>/dev/null"),
      "cuda:99", /*launched=*/true);
}

#ifdef TROUPE_TEST_GPU_MODULE
TEST_CASE("a CUDA module that does not load is named and the CPU does not need it",
          "[example][device]") {
  troupe::test::TempDir dir;
  const std::string damaged = dir.path() + "/libtroupe_gpu.so";
  troupe::test::write_bytes(damaged, {'n', 'o', 't', ' ', 'E', 'L', 'F'});
  for (const std::string& module : {damaged, dir.path() + "/absent.so"}) {
    INFO(module);
    auto r = run_program("TROUPE_GPU_MODULE=" + module + " " + bin +
                         "/fmnist_local --max-steps 2 --device cuda:0 2>/dev/null");
    refused(r, "cuda:0");
    CHECK_THAT(r.last_json["error"].get<std::string>(),
               Catch::Contains(module) && Catch::Contains("could not be loaded"));
  }
  // The CPU path never looks for it.
  auto cpu = run_program("TROUPE_GPU_MODULE=" + damaged + " " + bin +
                         "/fmnist_local --max-steps 2 --device cpu 2>/dev/null");
  INFO(cpu.output);
  CHECK(cpu.exit_code == 0);
  CHECK(cpu.last_json["ok"] == true);
}
#endif

TEST_CASE("a misspelt --device or --precision is named before anything runs", "[example][device]") {
  for (const std::string program :
       {"fmnist_local", "fmnist_ps", "ctr_ps --data /nonexistent", "ctr_fit --data /nonexistent"}) {
    INFO(program);
    auto d = run_program(bin + "/" + program + " --device tpu:0 2>/dev/null");
    CHECK(d.exit_code != 0);
    REQUIRE(d.last_json.is_object());
    CHECK_THAT(d.last_json["error"].get<std::string>(), Catch::Contains("'tpu:0'"));
    auto p = run_program(bin + "/" + program + " --precision mixed_int4 2>/dev/null");
    CHECK(p.exit_code != 0);
    REQUIRE(p.last_json.is_object());
    CHECK_THAT(p.last_json["error"].get<std::string>(), Catch::Contains("'mixed_int4'"));
  }
}

TEST_CASE("fmnist_local in the mixed policies on the CPU: reported, and near float32's accuracy",
          "[example][device]") {
  auto run = [](const std::string& precision) {
    auto r = run_program(bin + "/fmnist_local --epochs 1 --max-steps 300 --precision " + precision +
                         " 2>/dev/null");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    REQUIRE(r.last_json.is_object());
    return r.last_json;
  };
  const auto f32 = run("float32"), f16 = run("mixed_float16");
  CHECK(f32["precision"] == "float32");
  CHECK(f32["device"] == "cpu");
  CHECK(f16["precision"] == "mixed_float16");
  CHECK(f32["loss_scale"] == 1.0);
  // Keras' initial scale, halved once per skipped step (none in this short run, or few).
  CHECK(f16["loss_scale"].get<double>() * (1 << f16["skipped_steps"].get<int>()) == 32768.0);
  const double acc = f32["test_accuracy"].get<double>();
  CHECK(acc > 0.75);
  CHECK(std::abs(f16["test_accuracy"].get<double>() - acc) < 0.02);
  // mixed_bfloat16 where this CPU has AVX512_BF16; where it lacks it, the refusal the next
  // test makes with a mask happens for real.
  const auto& features = f32["cpu_features"];
  if (std::find(features.begin(), features.end(), "avx512_bf16") == features.end()) {
    auto refused = run_program(bin + "/fmnist_local --epochs 1 --max-steps 5 " +
                               "--precision mixed_bfloat16 2>/dev/null");
    CHECK(refused.exit_code != 0);
    REQUIRE(refused.last_json.is_object());
    CHECK_THAT(refused.last_json["error"].get<std::string>(), Catch::Contains("AVX512_BF16"));
    return;
  }
  const auto bf16 = run("mixed_bfloat16");
  CHECK(bf16["precision"] == "mixed_bfloat16");
  CHECK(bf16["skipped_steps"] == 0);
  CHECK(std::abs(bf16["test_accuracy"].get<double>() - acc) < 0.02);
}

TEST_CASE("mixed_bfloat16 on a CPU without AVX512_BF16 is refused naming it, auto takes float32",
          "[example][device]") {
  // The dispatch's mask stands in for an older CPU: the kernels never see the feature.
  const std::string masked = "TROUPE_CPU_DISABLE=avx512_bf16 ";
  auto refused = run_program(masked + bin + "/fmnist_local --epochs 1 --max-steps 5 " +
                             "--precision mixed_bfloat16 2>/dev/null");
  CHECK(refused.exit_code != 0);
  REQUIRE(refused.last_json.is_object());
  CHECK_THAT(refused.last_json["error"].get<std::string>(), Catch::Contains("AVX512_BF16"));
  auto fallback = run_program(masked + bin + "/fmnist_local --epochs 1 --max-steps 5 " +
                              "--precision auto 2>/dev/null");
  REQUIRE(fallback.exit_code == 0);
  CHECK(fallback.last_json["precision"] == "float32");
  for (const auto& f : fallback.last_json["cpu_features"])
    CHECK(f != "avx512_bf16");
  // A misspelt mask is named, not ignored.
  auto bad = run_program("TROUPE_CPU_DISABLE=avx512_bf17 " + bin +
                         "/fmnist_local --epochs 1 --max-steps 5 2>/dev/null");
  CHECK(bad.exit_code != 0);
  REQUIRE(bad.last_json.is_object());
  CHECK_THAT(bad.last_json["error"].get<std::string>(), Catch::Contains("'avx512_bf17'"));
}
