// fmnist_fit: fit() with every callback under troupe launch, followed by the side-car
// evaluator; resumed after its chief is killed; with MultiWorkerMirroredStrategy on every
// worker (the chief alone writing; elastic through a kill -9); and alone in one process.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "event_records.hpp"
#include "helpers.hpp"
#include "launch_helpers.hpp"
#include "process.hpp"
#include "run_program.hpp"

using troupe::test::run_program;
using namespace std::chrono_literals;

namespace {

using troupe::test::bin;

// The evaluator's per-checkpoint lines (its last line is its summary).
std::vector<nlohmann::json> evaluations(const nlohmann::json& launch_result) {
  std::vector<nlohmann::json> out;
  for (const auto& e : launch_result["evaluator"])
    if (e.contains("checkpoint")) out.push_back(e);
  return out;
}

size_t count_lines(const std::string& path) {
  std::ifstream in(path);
  size_t n = 0;
  for (std::string line; std::getline(in, line);)
    ++n;
  return n;
}

// Runs fmnist_fit with the evaluator under launch with `cluster` ("--ps 2 --workers 2"),
// a checkpoint every 600 steps, and checks what every such run shows: the strategy, two
// epochs of 937 steps, four checkpoints, validation equal to the test figure, the
// evaluator ending on the final checkpoint with the chief's accuracy, every task ended.
// Returns launch's JSON line. `flags` go to fmnist_fit.
nlohmann::json run_with_evaluator(const troupe::test::TempDir& dir, const std::string& cluster,
                                  const std::string& strategy, const std::string& flags = "") {
  auto r = run_program(bin + "/troupe launch " + cluster + " --evaluator --run-dir " + dir.path() +
                       " -- " + bin + "/fmnist_fit --checkpoint-every-steps 600 " + flags +
                       " 2>/dev/null");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const auto& j = r.last_json;
  REQUIRE(j.is_object());
  const auto& chief = j["chief"];
  CHECK(chief["ok"] == true);
  CHECK(chief["strategy"] == strategy);
  CHECK(chief["steps"] == 1874);
  CHECK(chief["epochs_run"] == 2);
  CHECK(chief["checkpoints"] == 4);  // steps 600, 1200, 1800 and the final 1874
  CHECK(chief["val_accuracy"] == chief["test_accuracy"]);  // distributed = direct
  const auto ev = evaluations(j);
  REQUIRE_FALSE(ev.empty());
  CHECK(ev.back()["step"] == 1874);
  CHECK(ev.back()["accuracy"] == chief["test_accuracy"]);
  for (const auto& t : j["tasks"])
    CHECK(t["exit"] == 0);
  troupe::test::check_all_gone(j["tasks"]);
  return j;
}

}  // namespace

// With Adam (lr 0.001, batch 64, 2 epochs) the final accuracy of this run scattered from
// 0.845 to 0.860 over six seeds on this machine, so the 0.83 holds with margin.
TEST_CASE("fmnist_fit trains with fit() under launch and the evaluator follows its checkpoints",
          "[example][fit]") {
  troupe::test::TempDir dir;
  const auto j = run_with_evaluator(dir, "--ps 2 --workers 2", "parameter_server");
  const auto& chief = j["chief"];
  CHECK(chief["closures_completed"] == chief["closures_scheduled"]);
  // The evaluator: one line per checkpoint it saw, the last being the final one.
  const auto ev = evaluations(j);
  REQUIRE(ev.size() >= 2);
  CHECK(ev.back()["examples"] == 10000);
  // Asynchronous training's final iterate scatters run to run: see async_accuracy_floor.
  CHECK(ev.back()["accuracy"].get<double>() >= troupe::test::async_accuracy_floor);
  for (size_t i = 1; i < ev.size(); ++i)
    CHECK(ev[i]["step"].get<int>() > ev[i - 1]["step"].get<int>());
  const auto& summary = j["evaluator"].back();
  CHECK(summary["ok"] == true);
  CHECK(summary["evaluations"] == ev.size());

  // Summaries: training and validation scalars for both epochs, the evaluator's for each
  // checkpoint, and the JSONL logs.
  const std::string model_dir = dir.file("fmnist_fit");
  int epoch_losses = 0;
  for (const auto& s : troupe::test::read_scalars(model_dir + "/logs/train"))
    if (s.tag == "epoch_loss") ++epoch_losses;
  CHECK(epoch_losses == 2);
  int val_acc = 0;
  for (const auto& s : troupe::test::read_scalars(model_dir + "/logs/validation"))
    if (s.tag == "epoch_accuracy") ++val_acc;
  CHECK(val_acc == 2);
  CHECK(troupe::test::read_scalars(model_dir + "/logs/eval").size() == 2 * ev.size());
  CHECK(count_lines(model_dir + "/logs/metrics.jsonl") == 2);
  CHECK(count_lines(model_dir + "/logs/eval/metrics.jsonl") == ev.size());
  CHECK_FALSE(std::filesystem::exists(model_dir + "/backup"));  // removed at the end
}

TEST_CASE("fmnist_fit resumes from its backup when its chief is killed and restarted",
          "[example][fit][chaos]") {
  troupe::test::TempDir dir;
  const std::string run_dir = dir.file("run");
  const std::string backup_dir = run_dir + "/fmnist_fit/backup";
  const auto run = troupe::test::run_killing_chief(
      bin + "/troupe launch --ps 2 --workers 2 --evaluator --restart-failed --run-dir " + run_dir +
          " -- " + bin + "/fmnist_fit --backup-every-steps 200",
      run_dir, backup_dir, dir.file("launch.out"));
  const auto& j = run.result;
  INFO(j.dump());
  const auto& chief = j["chief"];
  const int64_t resumed = chief["resumed_from_step"].get<int64_t>();
  CHECK(resumed >= 200);
  CHECK(resumed % 200 == 0);
  CHECK(chief["steps"] == 1874);
  CHECK(chief["steps_run"].get<int64_t>() == 1874 - resumed);
  CHECK(chief["test_accuracy"].get<double>() >= troupe::test::async_accuracy_floor);
  // The evaluator never noticed: it followed the checkpoints of both chiefs to the end.
  const auto ev = evaluations(j);
  REQUIRE_FALSE(ev.empty());
  CHECK(ev.back()["step"] == 1874);
  CHECK(ev.back()["accuracy"] == chief["test_accuracy"]);
  CHECK_FALSE(std::filesystem::exists(backup_dir));
}

// Synchronous training is deterministic for a seed: this run's accuracy is a fixed figure
// (0.8411), not a draw.
// The gradients travel as bfloat16 (fmnist_mirrored's own test and bench/compare_precision.sh
// compare it with float32): the replicas still end with equal weights.
TEST_CASE("fmnist_fit trains every worker with MultiWorkerMirroredStrategy, the chief writes",
          "[example][fit][mirrored]") {
  troupe::test::TempDir dir;
  const auto j = run_with_evaluator(dir, "--workers 2", "mirrored", "--wire-dtype bf16");
  const auto& chief = j["chief"];
  CHECK(chief["wire_dtype"] == "bf16");
  CHECK(chief["workers"] == 2);
  CHECK(chief["backups"] == 2);
  CHECK(chief["test_accuracy"].get<double>() >= 0.83);
  // The other replica: the same logs and weights, nothing written.
  const auto other = troupe::test::last_json_line(dir.file("worker-1.log"));
  INFO(other.dump());
  CHECK(other["chief"] == false);
  CHECK(other["steps"] == 1874);
  CHECK(other["checkpoints"] == 0);
  CHECK(other["backups"] == 0);
  for (const char* k : {"loss", "val_loss", "val_accuracy", "test_accuracy"})
    CHECK(other[k] == chief[k]);
  const std::string model_dir = dir.file("fmnist_fit");
  CHECK(count_lines(model_dir + "/logs/metrics.jsonl") == 2);  // the chief's two epochs only
  CHECK_FALSE(std::filesystem::exists(model_dir + "/backup"));
  for (const auto& e : std::filesystem::recursive_directory_iterator(model_dir))
    CHECK(e.path().filename().string().find("worker") == std::string::npos);
}

TEST_CASE("elastic mirrored fmnist_fit survives kill -9 of a worker, takes it back, ends equal",
          "[example][fit][mirrored][elastic]") {
  troupe::test::TempDir dir;
  const std::string run_dir = dir.file("run");
  const auto j = troupe::test::run_killing_task(
      bin + "/troupe launch --workers 3 --restart-failed --run-dir " + run_dir + " -- " + bin +
          "/fmnist_fit --elastic --epochs 3 --checkpoint-every-steps 100",
      run_dir, run_dir + "/fmnist_fit/ckpt", dir.file("launch.out"), "worker:2");
  INFO(j.dump());
  CHECK(j["ok"] == true);
  CHECK(j["restarts"] == 1);
  const auto& chief = j["chief"];
  CHECK(chief["steps"] == 2811);
  CHECK(chief["epochs_run"] == 3);
  CHECK(chief["workers_lost"] == 1);
  CHECK(chief["workers_joined"] == 1);
  CHECK(chief["workers"] == 3);
  CHECK(chief["test_accuracy"].get<double>() >= 0.83);
  // Every process ended at the same step with the same weights; the returning worker
  // entered fit() where the others were, with their state.
  for (int w = 1; w < 3; ++w) {
    auto jw = troupe::test::last_json_line(run_dir + "/worker-" + std::to_string(w) + ".log");
    INFO("worker " << w << ": " << jw.dump());
    CHECK(jw["steps"] == 2811);
    CHECK(jw["test_accuracy"] == chief["test_accuracy"]);
    CHECK(jw["val_loss"] == chief["val_loss"]);
    if (w == 2) {
      CHECK(jw["resumed_from_step"].get<int64_t>() > 0);
      CHECK(jw["steps_run"].get<int64_t>() == 2811 - jw["resumed_from_step"].get<int64_t>());
    }
  }
  for (const auto& t : j["tasks"])
    CHECK(t["exit"] == 0);
}

TEST_CASE("fmnist_fit runs fit() in one process without TF_CONFIG", "[example][fit]") {
  troupe::test::TempDir dir;
  auto r = run_program("env -u TF_CONFIG " + bin + "/fmnist_fit --epochs 1 --steps-per-epoch 300" +
                       " --model-dir " + dir.path() + " 2>/dev/null");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const auto& j = r.last_json;
  CHECK(j["ok"] == true);
  CHECK(j["strategy"] == "default");
  CHECK(j["steps"] == 300);
  CHECK(j["checkpoints"] == 1);
  CHECK(j["test_accuracy"].get<double>() > 0.75);
  CHECK(std::filesystem::exists(dir.file("ckpt/ckpt-300.tckpt")));
  CHECK(std::filesystem::exists(dir.file("ckpt/final.json")));
}

TEST_CASE("fmnist_fit and fmnist_local refuse --wire-dtype bf16 in one process", "[example][fit]") {
  troupe::test::TempDir dir;
  auto r = run_program("env -u TF_CONFIG " + bin + "/fmnist_fit --wire-dtype bf16 --model-dir " +
                       dir.path() + " 2>&1");
  INFO(r.output);
  CHECK(r.exit_code != 0);
  CHECK(r.last_json["ok"] == false);
  CHECK_THAT(r.last_json["error"].get<std::string>(),
             Catch::Contains("--wire-dtype bf16") && Catch::Contains("one process"));
  CHECK_FALSE(std::filesystem::exists(dir.file("ckpt")));  // refused before training
  auto local = run_program(bin + "/fmnist_local --wire-dtype bf16 --max-steps 1 2>&1");
  INFO(local.output);
  CHECK(local.exit_code != 0);
  CHECK(local.last_json["ok"] == false);
  CHECK_THAT(local.last_json["error"].get<std::string>(),
             Catch::Contains("--wire-dtype bf16") && Catch::Contains("one process"));
  auto typo = run_program("env -u TF_CONFIG " + bin + "/fmnist_fit --wire-dtype bf61 2>&1");
  CHECK(typo.exit_code != 0);
  CHECK_THAT(typo.last_json["error"].get<std::string>(), Catch::Contains("bf61"));
}

TEST_CASE("a mistyped option ends every program with a JSON line naming it, --help with one too",
          "[example]") {
  for (const std::string program :
       {"fmnist_fit", "fmnist_ps", "fmnist_local", "ctr_ps", "ctr_datagen", "troupe"}) {
    INFO(program);
    auto r = run_program("env -u TF_CONFIG " + bin + "/" + program + " --no-such-flag 2>/dev/null");
    INFO(r.output);
    CHECK(r.exit_code == 1);  // permanent: a restart would not help
    REQUIRE(r.last_json.is_object());
    CHECK(r.last_json["ok"] == false);
    CHECK(r.last_json["program"] == program);
    // What is wrong, named: the flag, or first a required option the command lacks.
    const auto error = r.last_json["error"].get<std::string>();
    CHECK_THAT(error, Catch::StartsWith("command line: "));
    if (program.rfind("fmnist", 0) == 0) CHECK_THAT(error, Catch::Contains("--no-such-flag"));
    auto help = run_program(bin + "/" + program + " --help 2>/dev/null");
    CHECK(help.exit_code == 0);
    CHECK(help.last_json["help"] == true);
  }
}

namespace {

// A Fashion-MNIST directory in `dir` built from the real one: `damage` then changes it.
void copy_fmnist(const std::string& dir) {
  std::filesystem::create_directories(dir);
  for (const char* f : {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                        "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"})
    std::filesystem::copy_file(std::string("/usr/share/datasets/fashion-mnist/") + f,
                               dir + "/" + f);
}

// An unsigned-byte IDX file (not compressed) of the given shape, every byte 7.
void write_idx(const std::string& path, const std::vector<uint32_t>& dims) {
  std::string bytes = {0, 0, 0x08, static_cast<char>(dims.size())};
  size_t n = 1;
  for (uint32_t d : dims) {
    for (int shift : {24, 16, 8, 0})
      bytes.push_back(static_cast<char>((d >> shift) & 0xff));
    n *= d;
  }
  bytes.append(n, 7);
  troupe::test::write_bytes(path, std::vector<char>(bytes.begin(), bytes.end()));
}

// fmnist_fit ended by its own error (not a signal), with a JSON line naming `names`.
void check_names(const troupe::test::ProgramRun& r, const std::string& names) {
  INFO(r.output);
  CHECK(r.exit_code > 0);
  CHECK(r.exit_code < 128);  // 134 was SIGABRT through the shell
  REQUIRE(r.last_json.is_object());
  CHECK(r.last_json["ok"] == false);
  CHECK_THAT(r.last_json["error"].get<std::string>(), Catch::Contains(names));
}

}  // namespace

TEST_CASE("fmnist_fit ends with an error naming a missing, truncated or other-shape data file",
          "[example][fit]") {
  troupe::test::TempDir dir;
  auto alone = [&](const std::string& data) {
    return run_program("env -u TF_CONFIG " + bin + "/fmnist_fit --epochs 1 --steps-per-epoch 5" +
                       " --data-dir " + data + " --model-dir " + dir.file("m") + " 2>&1");
  };
  check_names(alone(dir.file("nowhere")), dir.file("nowhere") + "/train-images-idx3-ubyte.gz");

  const std::string truncated = dir.file("truncated");
  copy_fmnist(truncated);
  std::filesystem::resize_file(truncated + "/train-images-idx3-ubyte.gz", 1 << 20);
  check_names(alone(truncated), truncated + "/train-images-idx3-ubyte.gz");

  const std::string shape = dir.file("shape");
  copy_fmnist(shape);
  write_idx(shape + "/train-images-idx3-ubyte.gz", {10, 20, 20});
  write_idx(shape + "/train-labels-idx1-ubyte.gz", {10});
  check_names(alone(shape), "20x20 pixels");

  // Both mirrored workers end by the error (each its own JSON line), and launch reports it.
  auto r = run_program(bin + "/troupe launch --workers 2 --run-dir " + dir.file("run") + " -- " +
                       bin + "/fmnist_fit --epochs 1 --steps-per-epoch 5 --data-dir " + truncated +
                       " 2>/dev/null");
  INFO(r.output);
  CHECK(r.exit_code != 0);
  REQUIRE(r.last_json.is_object());
  troupe::test::check_all_gone(r.last_json["tasks"]);
  // The chief's line is launch's "chief"; the other worker's is in its log.
  for (const auto& j :
       {r.last_json["chief"], troupe::test::last_json_line(dir.file("run/worker-1.log"))}) {
    INFO(j.dump());
    REQUIRE(j.is_object());
    CHECK(j["ok"] == false);
    CHECK_THAT(j["error"].get<std::string>(), Catch::Contains("train-images-idx3-ubyte.gz"));
  }
  for (const auto& t : r.last_json["tasks"]) {
    INFO(t.dump());
    CHECK_FALSE(t.contains("signal"));  // each ended by its own error
    CHECK(t["exit"].is_number());
  }
}
