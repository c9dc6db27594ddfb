// Jobs on the machine as a cluster engine would run them. A job across hosts of its own:
// tests/multihost/netns_cluster.sh gives every task a network namespace with its own address and
// host name on a private bridge, runs the program in each, cuts one task's link for 3 s, and ends
// every process and namespace it made. Needs root (network namespaces); elsewhere the script says
// it skipped, and so do these tests.
#include <filesystem>

#include <catch2/catch.hpp>

#include "helpers.hpp"
#include "run_program.hpp"

namespace fs = std::filesystem;
using troupe::test::run_program;

namespace {

const std::string script = TROUPE_SOURCE_DIR "/tests/multihost/netns_cluster.sh";
const std::string slurm = TROUPE_SOURCE_DIR "/tests/slurm/local_slurm.sh";
const std::string bin = TROUPE_BIN_DIR;
const std::string manifest_reader = TROUPE_SOURCE_DIR "/tests/multihost/tfjob_manifest.py";
const std::string deploy = TROUPE_SOURCE_DIR "/deploy/";
// The TensorFlow PS tutorial's model as a .keras file (tests/keras/model_fixtures.py).
const std::string keras_model = TROUPE_KERAS_FIXTURES "/models/ps_tutorial";

// The script's result; false (with a warning) where this machine cannot make namespaces.
bool ran(const nlohmann::json& j) {
  REQUIRE(j.is_object());
  if (j.contains("skipped")) {
    WARN("skipped: " << j["skipped"].get<std::string>());
    return false;
  }
  return true;
}

// What `troupe predict` gives for a .keras file on the fixture's held-out file.
nlohmann::json predict(const std::string& model) {
  auto r = run_program(bin + "/troupe predict --model " + model + " --data " + keras_model +
                       "/test.tfrecord --batch 100 2>&1");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  return r.last_json;
}

// The model a job wrote learned (its held-out loss below the untrained file's), and it is
// the model the chief validated: troupe predict scores it as the chief's last validation.
void check_trained(const nlohmann::json& chief, const std::string& trained) {
  const auto before = predict(keras_model + "/model.keras");
  const auto after = predict(trained);
  INFO("before " << before.dump() << "\nafter " << after.dump());
  CHECK(after["loss"].get<double>() < before["loss"].get<double>());
  CHECK(std::abs(chief["val_loss"].get<double>() - after["loss"].get<double>()) < 1e-4);
  CHECK(chief["val_accuracy"].get<double>() == Approx(after["accuracy"].get<double>()));
}

// A deploy/ manifest read as Kubeflow's training operator would (the reader's plan must be
// valid; it is returned in `plan`), then its job run across namespace hosts with the
// operator's host names and TF_CONFIG, /state being `state`.
troupe::test::ProgramRun run_manifest(const std::string& file, const std::string& state,
                                      nlohmann::json& plan) {
  auto read = run_program("python3 " + manifest_reader + " " + deploy + file + " " + state);
  INFO(read.output);
  REQUIRE(read.exit_code == 0);
  plan = read.last_json;
  REQUIRE(plan["ok"] == true);
  std::string args;
  for (const auto& a : plan["args"])
    args += " '" + a.get<std::string>() + "'";
  return run_program(script + " " + bin + " " + plan["program"].get<std::string>() + " " +
                     std::to_string(plan["ps"].get<int>()) + " " +
                     std::to_string(plan["workers"].get<int>()) + " --tfjob " +
                     plan["name"].get<std::string>() + "." + plan["namespace"].get<std::string>() +
                     " --" + args);
}

}  // namespace

TEST_CASE("fmnist_ps trains across namespace hosts by name and survives a 3 s link cut",
          "[multihost][ps]") {
  auto r = run_program(script + " " + bin + " fmnist_ps 2 2 --cut worker-1 1 3" +
                       " -- --steps-per-worker 12000");
  INFO(r.output);
  if (!ran(r.last_json)) return;
  const auto& j = r.last_json;
  CHECK(j["ok"] == true);
  CHECK(j["tasks"] == 5);
  const auto& chief = j["chief"];
  REQUIRE(chief.is_object());
  CHECK(chief["ok"] == true);
  // Every closure ran once: those in flight on the cut worker were retried elsewhere.
  CHECK(chief["closures_scheduled"] == 24000);
  CHECK(chief["closures_completed"] == 24000);
  CHECK(chief["test_accuracy"].get<double>() >= troupe::test::async_accuracy_floor);
  // Detected (heartbeats stop crossing the cut link), retried, and taken back once the
  // link is up: the same process, reached again by its name.
  CHECK(chief["workers_lost"].get<int>() >= 1);
  CHECK(chief["closures_retried"].get<int>() >= 1);
  CHECK(chief["worker_rejoins"].get<int>() >= 1);
}

TEST_CASE(
    "fmnist_ps with two copies of each shard: a PS cut off from the chief alone is failed "
    "over, rejoins when the link heals, and nothing is lost",
    "[multihost][ps][replicas]") {
  // Split brain: for 3 s ps-1 and the chief cannot reach each other, while the workers
  // still reach both. The chief fails ps-1 over (heartbeats stop) and moves the epoch on:
  // a worker that has not heard yet is refused by ps-0's copies, so no update lands on
  // ps-1 alone and counts. When the link heals the same ps-1 process answers its address
  // again and rejoins: its shards are made afresh and copied from ps-0.
  auto r = run_program(script + " " + bin + " fmnist_ps 2 2 --cut-between chief-0 ps-1 1 3" +
                       " -- --steps-per-worker 12000 --ps-replicas 2");
  INFO(r.output);
  if (!ran(r.last_json)) return;
  const auto& j = r.last_json;
  CHECK(j["ok"] == true);
  const auto& chief = j["chief"];
  REQUIRE(chief.is_object());
  REQUIRE(chief["ok"] == true);  // the fields below are only in a successful run's line
  CHECK(chief["closures_scheduled"] == 24000);
  CHECK(chief["closures_completed"] == 24000);
  CHECK(chief["test_accuracy"].get<double>() >= troupe::test::async_accuracy_floor);
  CHECK(chief["ps_failovers"].get<int>() >= 1);
  CHECK(chief["updates_lost"] == 0);
  CHECK(chief["ps_restores"] == 0);
  CHECK(chief["workers_lost"] == 0);                 // the workers' links were never cut
  CHECK(chief["replicas_rebuilt"].get<int>() >= 4);  // ps-1's copies of the 4 variables
  CHECK(chief["under_replicated_shards"] == 0);
}

TEST_CASE("elastic fmnist_mirrored trains across namespace hosts over TLS, re-forming at a cut",
          "[multihost][mirrored][tls]") {
  // Every ring link in TLS (the PS test above runs without): the cut lands inside TLS
  // records, and the re-formed ring's new connections run the TLS handshake again.
  auto r =
      run_program("TROUPE_TLS=1 " + script + " " + bin + " fmnist_mirrored 0 3 --cut worker-2 1 3" +
                  " -- --elastic --no-shared-memory --steps 8000 --timeout-ms 1000");
  INFO(r.output);
  if (!ran(r.last_json)) return;
  const auto& j = r.last_json;
  CHECK(j["ok"] == true);
  const auto& chief = j["chief"];
  REQUIRE(chief.is_object());
  CHECK(chief["ok"] == true);
  CHECK(chief["steps"] == 8000);
  CHECK(chief["shared_memory_links"] == 0);  // the ring's bytes cross the bridge
  CHECK(chief["tls_links"] == 2);
  // The stall is detected by the collective timeout and the ring re-formed. The cut hits
  // either a step's gradient all-reduce (that step is done again) or the membership vote
  // at a step boundary (no step to redo; CI saw both): steps_redone is 0 or more, and
  // steps counts each step once either way.
  CHECK(chief["reforms"].get<int>() >= 1);
  CHECK(chief["steps_redone"].get<int>() <= chief["reforms"].get<int>());
  CHECK(chief["test_accuracy"].get<double>() >= 0.80);
}

TEST_CASE("srun -n 5 fmnist_ps under a real local Slurm trains to the usual accuracy",
          "[slurm][ps]") {
  // Debian's munged, slurmctld and slurmd, configured by the script; the tasks find their
  // cluster through SlurmClusterResolver (no TF_CONFIG): rank 0 the chief, 1-2 PS, 3-4
  // workers, ports from TROUPE_SLURM_PORT_BASE, one cluster secret for the job.
  auto r = run_program(slurm + " " + bin + " 5 fmnist_ps");
  INFO(r.output);
  if (!ran(r.last_json)) return;
  const auto& j = r.last_json;
  CHECK(j["ok"] == true);
  CHECK(j["srun_exit"] == 0);
  const auto& chief = j["chief"];
  REQUIRE(chief.is_object());
  CHECK(chief["ok"] == true);
  CHECK(chief["ps"] == 2);
  CHECK(chief["workers"] == 2);
  CHECK(chief["closures_completed"] == 1876);
  CHECK(chief["test_accuracy"].get<double>() >= troupe::test::async_accuracy_floor);
}

// deploy/'s manifests, as Kubeflow's training operator runs them: each task on a host of
// its own named "<job>-<type>-<i>.<namespace>.svc", TF_CONFIG with those names and
// "environment": "cloud", the pod's command and args (the job's volume a directory here).
TEST_CASE("deploy/'s TFJob manifests train across hosts named and configured as the operator does",
          "[multihost][k8s]") {
  for (const char* file : {"tfjob-ps.yaml", "tfjob-mirrored.yaml"}) {
    INFO(file);
    troupe::test::TempDir state;
    nlohmann::json p;
    auto r = run_manifest(file, state.path(), p);
    const int ps = p["ps"], workers = p["workers"];
    INFO(r.output);
    if (!ran(r.last_json)) return;
    const auto& j = r.last_json;
    CHECK(j["ok"] == true);
    CHECK(j["chief_exit"] == 0);
    CHECK(j["tasks"] == ps + workers + (ps > 0 ? 1 : 0));
    const auto& chief = j["chief"];
    REQUIRE(chief.is_object());
    CHECK(chief["ok"] == true);
    CHECK(chief["test_accuracy"].get<double>() >= troupe::test::async_accuracy_floor);
  }
}

// A user's Keras model through the same cluster engines: every task runs the one generic
// binary (`troupe train`) and gets the model from the chief; what it writes is what the PS
// tasks held at the end.
TEST_CASE("srun -n 5 troupe train trains a .keras model under a real local Slurm",
          "[slurm][ps][keras]") {
  troupe::test::TempDir out;
  auto r = run_program(slurm + " " + bin + " 5 troupe train --model " + keras_model +
                       "/model.keras --data " + keras_model + "/train.tfrecord --batch 32 " +
                       "--steps 300 --validation " + keras_model + "/test.tfrecord --out " +
                       out.path() + "/trained.keras");
  INFO(r.output);
  if (!ran(r.last_json)) return;
  const auto& j = r.last_json;
  CHECK(j["srun_exit"] == 0);
  const auto& chief = j["chief"];
  REQUIRE(chief.is_object());
  CHECK(chief["ok"] == true);
  CHECK(chief["ps"] == 2);
  CHECK(chief["workers"] == 2);
  CHECK(chief["steps"] == 300);
  check_trained(chief, out.path() + "/trained.keras");
}

TEST_CASE(
    "deploy/tfjob-keras.yaml trains a user's .keras file across hosts named as the "
    "operator does",
    "[multihost][k8s][keras]") {
  troupe::test::TempDir state;
  // The job's volume holds the model and its data, as the manifest's header asks.
  const fs::path dir = fs::path(state.path()) / "keras";
  fs::create_directories(dir);
  for (const char* file : {"model.keras", "train.tfrecord", "test.tfrecord"})
    fs::copy_file(fs::path(keras_model) / file, dir / file);
  nlohmann::json p;
  auto r = run_manifest("tfjob-keras.yaml", state.path(), p);
  CHECK(p["program"] == "troupe");
  INFO(r.output);
  if (!ran(r.last_json)) return;
  const auto& j = r.last_json;
  CHECK(j["ok"] == true);
  CHECK(j["chief_exit"] == 0);
  const auto& chief = j["chief"];
  REQUIRE(chief.is_object());
  CHECK(chief["ok"] == true);
  CHECK(chief["steps"] == 900);  // 3 epochs of 300
  check_trained(chief, (dir / "trained.keras").string());
}
