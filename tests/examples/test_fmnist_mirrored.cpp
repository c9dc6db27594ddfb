// fmnist_mirrored under troupe launch: synchronous training to the accuracy, the
// chief's checkpoints (the others' temporary ones removed), a worker killed with SIGKILL
// in elastic mode (the others carry on, it comes back, all end equal), and without
// elastic mode the same kill ending the job with an error naming the lost neighbour.
#include <catch2/catch.hpp>

#include <signal.h>

#include <filesystem>
#include <fstream>

#include "helpers.hpp"
#include "launch_helpers.hpp"
#include "process.hpp"
#include "run_program.hpp"
#include "tools/chaos.hpp"

using troupe::test::run_program;

namespace {

using troupe::test::bin;
using troupe::test::check_all_gone;

bool has_checkpoint(const std::string& dir) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec))
    if (e.path().extension() == ".tckpt") return true;
  return false;
}

}  // namespace

// Synchronous training is deterministic for a seed (the ring sums in a fixed order), so
// the accuracy of the default seed is a fixed figure, not a draw: 0.8418 (seeds 1-5:
// 0.834-0.842, docs/benchmarks.md).
TEST_CASE("fmnist_mirrored trains synchronously on two workers to >= 0.83", "[example][mirrored]") {
  troupe::test::TempDir dir;
  const std::string model_dir = dir.file("model");
  auto r = run_program(bin + "/troupe launch --workers 2 --run-dir " + dir.file("run") + " -- " +
                       bin + "/fmnist_mirrored --model-dir " + model_dir + " 2>/dev/null");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const auto& chief = r.last_json["chief"];
  REQUIRE(chief.is_object());
  CHECK(chief["ok"] == true);
  CHECK(chief["chief"] == true);
  CHECK(chief["workers"] == 2);
  CHECK(chief["steps"] == 938);
  CHECK(chief["examples"] == 938 * 128);
  CHECK(chief["examples_per_sec"].get<double>() > 0.0);
  CHECK(chief["test_accuracy"].get<double>() >= 0.83);
  // Worker 1 holds the same weights: it reports the same accuracy.
  auto w1 = troupe::test::last_json_line(dir.file("run") + "/worker-1.log");
  CHECK(w1["test_accuracy"] == chief["test_accuracy"]);
  CHECK(w1["chief"] == false);
  // The chief's checkpoint is there; worker 1's temporary directory is gone.
  CHECK(std::filesystem::exists(model_dir + "/ckpt-938.tckpt"));
  CHECK_FALSE(std::filesystem::exists(model_dir + "/workertemp_1"));
  // Two processes on one host: both ring directions go through shared memory.
  CHECK(chief["shared_memory_links"] == 2);
  check_all_gone(r.last_json["tasks"]);
}

TEST_CASE("fmnist_mirrored forms its ring over IPv6", "[example][mirrored]") {
  troupe::test::TempDir dir;
  auto r = run_program(bin + "/troupe launch --host ::1 --workers 2 --run-dir " + dir.path() +
                       " -- " + bin + "/fmnist_mirrored --no-shared-memory 2>/dev/null");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const auto& chief = r.last_json["chief"];
  REQUIRE(chief.is_object());
  CHECK(chief["ok"] == true);
  CHECK(chief["steps"] == 938);
  CHECK(chief["shared_memory_links"] == 0);  // every byte over TCP on ::1
  CHECK(chief["test_accuracy"].get<double>() >= 0.80);
  auto listing = nlohmann::json::parse(std::ifstream(dir.file("tasks.json")));
  CHECK(listing[0]["address"].get<std::string>().rfind("[::1]:", 0) == 0);
  check_all_gone(r.last_json["tasks"]);
}

TEST_CASE("fmnist_mirrored over shared memory, TCP or TLS reaches the same weights",
          "[example][mirrored][tls]") {
  // Shared memory, TCP, and TCP in TLS (launch --tls): three transports of the same sums.
  troupe::test::TempDir dir;
  const char* runs[3] = {"", " --no-shared-memory", " --no-shared-memory"};
  nlohmann::json chiefs[3];
  for (int run = 0; run < 3; ++run) {
    auto r = run_program(bin + "/troupe launch --workers 2" + (run == 2 ? " --tls" : "") +
                         " --run-dir " + dir.file("run" + std::to_string(run)) + " -- " + bin +
                         "/fmnist_mirrored --steps 60" + runs[run] + " 2>/dev/null");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    chiefs[run] = r.last_json["chief"];
    check_all_gone(r.last_json["tasks"]);
  }
  CHECK(chiefs[0]["shared_memory_links"] == 2);
  CHECK(chiefs[1]["shared_memory_links"] == 0);
  CHECK(chiefs[2]["shared_memory_links"] == 0);
  CHECK(chiefs[0]["tls_links"] == 0);
  CHECK(chiefs[1]["tls_links"] == 0);
  CHECK(chiefs[2]["tls_links"] == 2);
  // The transport moves bytes; the sums are the same, so are the weights.
  for (int run = 1; run < 3; ++run) {
    CHECK(chiefs[run]["test_accuracy"] == chiefs[0]["test_accuracy"]);
    CHECK(chiefs[run]["test_loss"] == chiefs[0]["test_loss"]);
  }
}

// What bfloat16 gradients cost in accuracy is measured by bench/compare_precision.sh over
// whole runs; here: the bytes halve and the replicas stay equal.
TEST_CASE("fmnist_mirrored --wire-dtype bf16 halves the ring's bytes and the replicas stay equal",
          "[example][mirrored][bf16]") {
  troupe::test::TempDir dir;
  nlohmann::json chiefs[2];
  for (int run = 0; run < 2; ++run) {
    const std::string run_dir = dir.file("run" + std::to_string(run));
    auto r = run_program(bin + "/troupe launch --workers 2 --run-dir " + run_dir + " -- " + bin +
                         "/fmnist_mirrored --steps 60 --wire-dtype " +
                         (run == 0 ? "float32" : "bf16") + " 2>/dev/null");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    chiefs[run] = r.last_json["chief"];
    check_all_gone(r.last_json["tasks"]);
    auto w1 = troupe::test::last_json_line(run_dir + "/worker-1.log");
    CHECK(w1["test_accuracy"] == chiefs[run]["test_accuracy"]);
    CHECK(w1["test_loss"] == chiefs[run]["test_loss"]);
  }
  CHECK(chiefs[0]["wire_dtype"] == "float32");
  CHECK(chiefs[1]["wire_dtype"] == "bf16");
  const double ratio =
      chiefs[1]["ring_bytes_sent"].get<double>() / chiefs[0]["ring_bytes_sent"].get<double>();
  CHECK(ratio > 0.45);
  CHECK(ratio < 0.55);
  CHECK(chiefs[1]["test_accuracy"].get<double>() > 0.6);  // 60 steps: it learns
}

TEST_CASE("elastic fmnist_mirrored survives kill -9 of a worker and takes it back",
          "[example][mirrored][elastic]") {
  troupe::test::TempDir dir;
  const std::string run_dir = dir.file("run"), model_dir = dir.file("model");
  const auto j = troupe::test::run_killing_task(
      bin + "/troupe launch --workers 3 --restart-failed --run-dir " + run_dir + " -- " + bin +
          "/fmnist_mirrored --elastic --steps 1500 --checkpoint-every-steps 100 --model-dir " +
          model_dir,
      run_dir, model_dir, dir.file("launch.out"), "worker:2");
  INFO(j.dump());
  CHECK(j["ok"] == true);
  CHECK(j["restarts"] == 1);
  const auto& chief = j["chief"];
  CHECK(chief["steps"] == 1500);
  CHECK(chief["workers_lost"] == 1);
  CHECK(chief["workers_joined"] == 1);
  CHECK(chief["workers"] == 3);
  CHECK(chief["test_accuracy"].get<double>() >= 0.80);
  // Every process ended at the same step with the same weights: the same accuracy,
  // the returning worker too (it began from the others' state, not from scratch).
  for (int w = 1; w < 3; ++w) {
    auto jw = troupe::test::last_json_line(run_dir + "/worker-" + std::to_string(w) + ".log");
    INFO("worker " << w << ": " << jw.dump());
    CHECK(jw["steps"] == 1500);
    CHECK(jw["test_accuracy"] == chief["test_accuracy"]);
  }
  for (const auto& t : j["tasks"])
    CHECK(t["exit"] == 0);
}

TEST_CASE("without elastic mode a killed worker ends the job with an error naming the loss",
          "[example][mirrored]") {
  troupe::test::TempDir dir;
  const std::string run_dir = dir.file("run"), model_dir = dir.file("model");
  const auto j = troupe::test::run_killing_task(
      bin + "/troupe launch --workers 2 --grace-ms 2000 --run-dir " + run_dir + " -- " + bin +
          "/fmnist_mirrored --steps 100000 --checkpoint-every-steps 100 --model-dir " + model_dir,
      run_dir, model_dir, dir.file("launch.out"), "worker:1");
  INFO(j.dump());
  CHECK(j["ok"] == false);
  const auto& chief = j["chief"];
  REQUIRE(chief.is_object());
  CHECK(chief["ok"] == false);
  CHECK_THAT(chief["error"].get<std::string>(), Catch::Contains("rank 1"));
  // What the chief saved before the loss is intact.
  CHECK(has_checkpoint(model_dir));
}

// NCCL is asked for by name and never quietly replaced by the ring: on a machine with no
// GPU (CI) the job refuses at start and says why; where a GPU is present it trains.
TEST_CASE("fmnist_mirrored with communication=nccl trains on a GPU or refuses naming why",
          "[example][mirrored]") {
  auto r = run_program("env -u TF_CONFIG " + bin +
                       "/fmnist_mirrored --communication nccl --steps 20 2>&1");
  INFO(r.output);
  REQUIRE(r.last_json.is_object());
  if (r.last_json["ok"] == true) {
    CHECK(r.exit_code == 0);
    CHECK(r.last_json["steps"] == 20);
    CHECK(r.last_json["communication"] == "nccl");
    return;
  }
  CHECK(r.exit_code != 0);
  const auto error = r.last_json["error"].get<std::string>();
  CHECK_THAT(error,
             Catch::Contains("communication=nccl") &&
                 (Catch::Contains("sees no GPU") || Catch::Contains("no such implementation")));
}
