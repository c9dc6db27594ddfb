// troupe launch running fmnist_ps as a local cluster: accuracy, counters, and that every
// process it started is gone afterwards.
#include <catch2/catch.hpp>

#include <signal.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "helpers.hpp"
#include "launch_helpers.hpp"
#include "net/socket.hpp"
#include "process.hpp"
#include "run_program.hpp"
#include "tools/chaos.hpp"
#include "troupe/exit_codes.hpp"

using troupe::test::run_program;

namespace {

using troupe::test::bin;
using troupe::test::check_all_gone;

}  // namespace

// The issue's goal is >= 0.83 test accuracy, a median over runs (docs/benchmarks.md); one
// run is held to the floor every asynchronous run clears (test::async_accuracy_floor).
TEST_CASE("troupe launch trains fmnist_ps with 2 PS and 2 workers", "[example][ps]") {
  troupe::test::TempDir dir;
  auto r = run_program(bin + "/troupe launch --ps 2 --workers 2 --run-dir " + dir.path() + " -- " +
                       bin + "/fmnist_ps 2>/dev/null");
  INFO(r.output);
  INFO(troupe::test::task_logs(dir.path()));
  REQUIRE(r.exit_code == 0);
  const auto& j = r.last_json;
  REQUIRE(j.is_object());
  CHECK(j["ok"] == true);
  const auto& chief = j["chief"];
  CHECK(chief["test_accuracy"].get<double>() >= troupe::test::async_accuracy_floor);
  CHECK(chief["closures_scheduled"] == 1876);
  CHECK(chief["closures_completed"] == 1876);
  CHECK(chief["examples_per_sec"].get<double>() > 0.0);
  // Every task's acknowledgement reached the chief before it exited.
  CHECK(chief["shutdown_acknowledged"] == true);
  REQUIRE(j["tasks"].size() == 5);
  for (const auto& t : j["tasks"])
    CHECK(t["exit"] == 0);
  check_all_gone(j["tasks"]);
  auto listing = nlohmann::json::parse(std::ifstream(dir.file("tasks.json")));
  CHECK(listing.size() == 5);
  CHECK(listing[0]["address"].get<std::string>().rfind("127.0.0.1:", 0) == 0);
}

TEST_CASE("fmnist_ps trains on while workers are killed and restarted", "[example][ps][chaos]") {
  // Three kills, each worker at least once, a restarted one again; --restart-failed starts
  // each again on its address and the coordinator takes it back. 5000 steps per worker
  // keep training going past the last kill on this machine (3.5 s; with 2000 a run could
  // end as the last kill landed, and launch ended the restarted worker with the job).
  auto r = run_program(bin + "/troupe launch --ps 2 --workers 2 --restart-failed" +
                       " --chaos kill:worker:1@0.8s --chaos kill:worker:0@1.4s" +
                       " --chaos kill:worker:1@2s -- " + bin +
                       "/fmnist_ps --steps-per-worker 5000 2>/dev/null");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const auto& j = r.last_json;
  REQUIRE(j.is_object());
  CHECK(j["injections"] == 3);
  const auto& chief = j["chief"];
  CHECK(chief["ok"] == true);
  CHECK(chief["closures_scheduled"] == 10000);
  CHECK(chief["closures_completed"] == 10000);
  CHECK(chief["closures_cancelled"] == 0);
  CHECK(chief["test_accuracy"].get<double>() >= troupe::test::async_accuracy_floor);
  // Every kill found a live process (the first one, or its restart) and it was restarted.
  CHECK(j["restarts"] == 3);
  // Training starts after launch does: train_s is a lower bound of when it ended on the
  // chaos clock, here 1 s after the last kill (a restart and rejoin take about 0.3 s), so
  // every worker lost came back. A kill counts as a loss when it hits a worker the chief
  // had connected: all three here, fewer where processes start slowly (2 of 3 in a run
  // under the sanitizers).
  // A lost worker's closures are retried only if it had some: a kill must land once
  // training runs (the chief's wall_s - train_s after launch, plus a second for the
  // workers to take closures). Under the sanitizers start-up takes ~2 s, and all three
  // kills can land before any closure was sent (seen in two CI runs).
  const double training_from = chief["wall_s"].get<double>() - chief["train_s"].get<double>() + 1.0;
  int late_kills = 0;
  for (const auto& k : j["chaos"])
    late_kills += k["at_s"].get<double>() > training_from ? 1 : 0;
  if (chief["train_s"].get<double>() > 3.0) {
    CHECK(chief["workers_lost"].get<int>() >= 1);
    CHECK(chief["workers_lost"].get<int>() <= 3);
    CHECK(chief["worker_rejoins"] == chief["workers_lost"]);
    if (late_kills > 0) CHECK(chief["closures_retried"].get<int>() > 0);
  }
  for (const auto& t : j["tasks"]) {
    CHECK(t["exit"] == 0);  // the restarted workers too: the chief shut them down
    if (t.contains("earlier_pids"))
      for (const auto& pid : t["earlier_pids"])
        CHECK(::kill(pid.get<int>(), 0) != 0);
  }
  check_all_gone(j["tasks"]);
}

TEST_CASE("fmnist_ps trains by host name over TLS and survives a killed worker",
          "[example][ps][chaos][tls]") {
  // TF_CONFIG names every task "localhost:port": CAF's gates and tunnels, the tensor
  // channel and the restarted worker's rejoin all resolve the name. --tls: every link in
  // TLS 1.3, the restarted worker's new connections included.
  troupe::test::TempDir dir;
  auto r = run_program(bin + "/troupe launch --tls --host localhost --ps 2 --workers 2" +
                       " --restart-failed --chaos kill:worker:1@2s --run-dir " + dir.path() +
                       " -- " + bin + "/fmnist_ps --steps-per-worker 3000 2>/dev/null");
  INFO(r.output);
  INFO(troupe::test::task_logs(dir.path()));
  REQUIRE(r.exit_code == 0);
  const auto& j = r.last_json;
  REQUIRE(j.is_object());
  const auto& chief = j["chief"];
  CHECK(chief["ok"] == true);
  CHECK(chief["closures_completed"] == 6000);
  CHECK(chief["test_accuracy"].get<double>() >= troupe::test::async_accuracy_floor);
  CHECK(j["injections"] == 1);
  CHECK(j["restarts"] == 1);
  CHECK(j["tls"] == true);
  CHECK(chief["tls"] == true);
  // Training ended at least train_s into the launch: past 3 s, 1 s after the kill. The kill
  // comes at 2 s, not 0.5 s: a sanitized TLS worker can take longer than 0.5 s to first
  // join, and its restart is then its first join, no rejoin (seen in a sanitizer run).
  if (chief["train_s"].get<double>() > 3.0) CHECK(chief["worker_rejoins"] == 1);
  auto listing = nlohmann::json::parse(std::ifstream(dir.file("tasks.json")));
  CHECK(listing[0]["address"].get<std::string>().rfind("localhost:", 0) == 0);
  check_all_gone(j["tasks"]);
}

TEST_CASE("fmnist_ps survives a worker stopped mid-training", "[example][ps][chaos]") {
  // SIGSTOP: the worker misses its heartbeats and is dropped after the 1 s connection
  // timeout; its closures run on the other worker. Resumed at 2.5 s, it rejoins (within
  // 0.3 s here).
  auto r = run_program(bin +
                       "/troupe launch --ps 1 --workers 2 --grace-ms 500 --chaos "
                       "stop:worker:1@1s+1.5s -- " +
                       bin + "/fmnist_ps --steps-per-worker 6000 2>/dev/null");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const auto& chief = r.last_json["chief"];
  CHECK(chief["closures_completed"] == chief["closures_scheduled"]);
  CHECK(chief["test_accuracy"].get<double>() >= troupe::test::async_accuracy_floor);
  // Training starts after launch does, so training that took train_s ended at least that
  // long after the launch (and its chaos clock) started. Training past 2.5 s (drop at
  // about 2 s) must have lost the worker; past 3.5 s (1 s after the resume), taken it back,
  // and so been able to shut it down. 6000 steps per worker train for about 4 s here.
  const double train = chief["train_s"].get<double>();
  if (train > 2.5) CHECK(chief["workers_lost"] == 1);
  if (train > 3.5) {
    CHECK(chief["worker_rejoins"] == 1);
    CHECK(chief["shutdown_acknowledged"] == true);
  }
  check_all_gone(r.last_json["tasks"]);
}

// ps:0 is killed once its second snapshot is on disk (ps-1: training under way, its updates
// being saved), not at a fixed time (on a loaded machine the variables may not exist yet at
// any given second), nor at the first (ps-0, taken as the variables are made: a kill that
// came late after it lost every update a loaded PS had applied since, 4032 of 4000
// closures' in one CI run).
TEST_CASE("fmnist_ps carries on when a PS is killed and restored from its snapshot",
          "[example][ps][chaos]") {
  using namespace std::chrono_literals;
  troupe::test::TempDir dir;
  const std::string run_dir = dir.file("run"), snapshots = dir.file("snapshots");
  const std::string out = dir.file("launch.out");
  troupe::test::ChildProcess launch(
      {"/bin/sh", "-c",
       "exec " + bin + "/troupe launch --ps 2 --workers 2 --restart-failed --run-dir " + run_dir +
           " -- " + bin + "/fmnist_ps --steps-per-worker 4000 --ps-snapshot-dir " + snapshots +
           " --ps-snapshot-interval-ms 200 > " + out},
      {});
  troupe::test::kill_task_after_checkpoint(run_dir, snapshots + "/ps-0", "ps-1", "ps:0", 60s);
  auto status = launch.wait_exit(120s);
  REQUIRE(status.has_value());
  INFO(launch.captured_stderr());
  INFO(troupe::test::task_logs(run_dir));
  CHECK((WIFEXITED(*status) && WEXITSTATUS(*status) == 0));
  const auto j = troupe::test::last_json_line(out);
  REQUIRE(j.is_object());
  CHECK(j["restarts"] == 1);
  const auto& chief = j["chief"];
  CHECK(chief["closures_completed"] == 8000);
  CHECK(chief["closures_cancelled"] == 0);
  CHECK(chief["test_accuracy"].get<double>() >= troupe::test::async_accuracy_floor);
  CHECK(chief["ps_restores"] == 1);
  // At most the updates of one snapshot interval and one poll are lost; 8000 closures
  // make 8000 updates on each PS.
  CHECK(chief["updates_lost"].get<int>() < 4000);
  for (const auto& t : j["tasks"]) {
    INFO(t.dump());
    CHECK(t["exit"] == 0);
  }
  check_all_gone(j["tasks"]);
}

// The same kill with two copies of every shard and no restart: the chief fails over to
// ps:0's copies at once; nothing is lost, nothing restored, every closure completes once.
TEST_CASE("fmnist_ps with --ps-replicas 2 trains on without a killed PS, losing nothing",
          "[example][ps][chaos][replicas]") {
  using namespace std::chrono_literals;
  troupe::test::TempDir dir;
  const std::string run_dir = dir.file("run"), snapshots = dir.file("snapshots");
  const std::string out = dir.file("launch.out");
  troupe::test::ChildProcess launch(
      {"/bin/sh", "-c",
       "exec " + bin + "/troupe launch --ps 2 --workers 2 --run-dir " + run_dir + " -- " + bin +
           "/fmnist_ps --steps-per-worker 2000 --ps-replicas 2 --ps-snapshot-dir " + snapshots +
           " --ps-snapshot-interval-ms 200 > " + out},
      {});
  // Its first snapshot on disk: training is under way (it snapshots after updates only).
  troupe::test::kill_task_after_checkpoint(run_dir, snapshots + "/ps-1", "ps-", "ps:1", 60s);
  auto status = launch.wait_exit(120s);
  REQUIRE(status.has_value());
  INFO(launch.captured_stderr());
  CHECK((WIFEXITED(*status) && WEXITSTATUS(*status) == 0));
  const auto j = troupe::test::last_json_line(out);
  REQUIRE(j.is_object());
  const auto& chief = j["chief"];
  INFO(chief.dump());
  CHECK(chief["ps_replicas"] == 2);
  CHECK(chief["closures_completed"] == 4000);
  CHECK(chief["closures_cancelled"] == 0);
  CHECK(chief["ps_failovers"] == 1);
  CHECK(chief["under_replicated_shards"] == 4);  // ps:1 held a copy of each of 4 variables
  CHECK(chief["updates_lost"] == 0);
  CHECK(chief["ps_restores"] == 0);
  CHECK(chief["test_accuracy"].get<double>() >= troupe::test::async_accuracy_floor);
  for (const auto& t : j["tasks"]) {
    INFO(t.dump());
    if (t["task"] != "ps:1") CHECK(t["exit"] == 0);
  }
  check_all_gone(j["tasks"]);
}

TEST_CASE("fmnist_ps fails clearly when a killed PS does not come back", "[example][ps][chaos]") {
  troupe::test::TempDir dir;
  auto r = run_program(bin + "/troupe launch --ps 2 --workers 2 --grace-ms 500" +
                       " --chaos kill:ps:1@1s -- " + bin +
                       "/fmnist_ps --steps-per-worker 3000 --ps-snapshot-dir " + dir.path() +
                       " --ps-restore-deadline-ms 1000 2>/dev/null");
  INFO(r.output);
  // A PS gone is a failure a restart may fix: TFJob's retryable code, passed on by launch.
  CHECK(r.exit_code == troupe::exit_retryable);
  REQUIRE(r.last_json.is_object());
  const auto& chief = r.last_json["chief"];
  CHECK(chief["ok"] == false);
  CHECK(chief["retryable"] == true);
  CHECK_THAT(chief["error"].get<std::string>(), Catch::Contains("ps:1 did not come back"));
  check_all_gone(r.last_json["tasks"]);
}

TEST_CASE("A killed chief is restarted and resumes from its backup at the saved step",
          "[example][ps][chaos]") {
  // The chief backs up every 100 closures. The test kills it (through the C++ chaos API,
  // by the pid launch lists in tasks.json) as soon as its first backup is on disk; launch
  // --restart-failed starts it again, it restores the backup onto the PS tasks (which kept
  // running) and schedules only the closures after the saved step.
  troupe::test::TempDir dir;
  const std::string run_dir = dir.file("run"), backup_dir = dir.file("backup");
  const auto run = troupe::test::run_killing_chief(
      bin + "/troupe launch --ps 2 --workers 2 --restart-failed --run-dir " + run_dir + " -- " +
          bin + "/fmnist_ps --steps-per-worker 1500 --backup-dir " + backup_dir +
          " --backup-every 100",
      run_dir, backup_dir, dir.file("launch.out"));
  const auto& j = run.result;
  INFO(j.dump());
  const auto& chief = j["chief"];
  const int64_t resumed = chief["resumed_from_step"].get<int64_t>();
  CHECK(resumed >= 100);
  CHECK(resumed % 100 == 0);
  CHECK(chief["incarnation"] == 2);
  CHECK(chief["closures_scheduled"].get<int64_t>() == 3000 - resumed);
  CHECK(chief["closures_completed"] == chief["closures_scheduled"]);
  CHECK(chief["test_accuracy"].get<double>() >= troupe::test::async_accuracy_floor);
  bool chief_listed = false;
  for (const auto& t : j["tasks"]) {
    CHECK(t["exit"] == 0);
    if (t["task"] == "chief:0") {
      chief_listed = true;
      CHECK(t["earlier_pids"] == std::vector<int>{run.first_chief});
    }
  }
  CHECK(chief_listed);
  CHECK_FALSE(std::filesystem::exists(backup_dir));  // removed when training ended
}

TEST_CASE("bench_failover measures detection and failover and ends its JSON line",
          "[example][bench][chaos]") {
  // Timings are the benchmark's business (docs/benchmarks.md); this checks that it runs,
  // kills and stops what it says, and reports every figure.
  auto r = run_program(bin + "/troupe launch --ps 1 --workers 2 --restart-failed -- " + bin +
                       "/bench_failover --rounds 1 2>/dev/null");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const auto& chief = r.last_json["chief"];
  REQUIRE(chief.is_object());
  CHECK(chief["ok"] == true);
  CHECK(chief["workers_lost"] == 2);  // one kill, one stop
  CHECK(chief["worker_rejoins"] == 2);
  CHECK(chief["closures_retried"].get<int>() >= 1);  // the held closure ran again
  std::set<std::string> metrics;
  for (const auto& m : chief["results"]) {
    metrics.insert(m["metric"].get<std::string>());
    CHECK(m["median"].get<double>() > 0.0);
  }
  CHECK(metrics == std::set<std::string>{"dispatch_ms", "kill_to_detect_ms", "kill_to_rerun_ms",
                                         "stop_to_detect_ms"});
  CHECK(r.last_json["restarts"] == 1);
  check_all_gone(r.last_json["tasks"]);
}

TEST_CASE("troupe launch reports a failed chief and ends every task", "[example][ps]") {
  // A truncated training file on the workers: their dataset function fails with the
  // reader's error (file, offset), the chief gets that error (not "the data ended"),
  // shuts the cluster down and exits non-zero.
  troupe::test::TempDir dir;
  const std::string src = "/usr/share/datasets/fashion-mnist/";
  auto images = troupe::test::read_bytes(src + "train-images-idx3-ubyte.gz");
  images.resize(images.size() / 3);
  troupe::test::write_bytes(dir.file("train-images-idx3-ubyte.gz"), images);
  std::filesystem::copy_file(src + "train-labels-idx1-ubyte.gz",
                             dir.file("train-labels-idx1-ubyte.gz"));
  auto r = run_program(bin + "/troupe launch --ps 1 --workers 2 -- " + bin +
                       "/fmnist_ps --data-dir " + dir.path() + " 2>/dev/null");
  INFO(r.output);
  CHECK(r.exit_code == troupe::exit_permanent);  // a corrupt file: restarting cannot help
  REQUIRE(r.last_json.is_object());
  CHECK(r.last_json["ok"] == false);
  CHECK(r.last_json["chief"]["ok"] == false);
  CHECK(r.last_json["chief"]["retryable"] == false);
  const auto error = r.last_json["chief"]["error"].get<std::string>();
  CHECK_THAT(error, Catch::Contains("data_loss") && Catch::Contains("train-images-idx3-ubyte.gz") &&
                        Catch::Contains("offset"));
  CHECK_THAT(error, !Catch::Contains("training data ended"));
  check_all_gone(r.last_json["tasks"]);
}

TEST_CASE("fmnist_ps takes a PS that stalled for 2 s back without a restore",
          "[example][ps][chaos]") {
  // SIGSTOP on ps:0 for 2 s with PS recovery on: its connections drop (missed
  // heartbeats), and the same process answers again with nothing lost. That is a
  // reconnection, not a restart: no restore, no update counted lost, the job trains on.
  troupe::test::TempDir dir;
  auto r = run_program(bin +
                       "/troupe launch --ps 2 --workers 2 --grace-ms 500 --chaos "
                       "stop:ps:0@2s+2s -- " +
                       bin + "/fmnist_ps --steps-per-worker 8000 --ps-snapshot-dir " + dir.path() +
                       " 2>/dev/null");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const auto& chief = r.last_json["chief"];
  CHECK(chief["closures_completed"] == chief["closures_scheduled"]);
  CHECK(chief["ps_restores"] == 0);
  CHECK(chief["updates_lost"] == 0);
  CHECK(chief["test_accuracy"].get<double>() >= troupe::test::async_accuracy_floor);
  // A run still training 1 s after the stop ended (train_s bounds that from below) must
  // have seen the connection drop (1 s without heartbeats) and taken the PS back
  // (dispatch waits for it meanwhile).
  if (chief["train_s"].get<double>() > 5.0) CHECK(chief["ps_reconnects"] == 1);
  check_all_gone(r.last_json["tasks"]);
}

TEST_CASE("bench_allreduce: ranks as real processes reduce exactly and report every size",
          "[example][bench][ring]") {
  // Three ranks (no PS: a cluster of three workers, worker 0 the chief), each its own
  // process on 127.0.0.1; the bulk bytes through shared memory between the processes, and
  // through TCP.
  const std::string transport = GENERATE("auto", "tcp");
  CAPTURE(transport);
  auto r = run_program(bin + "/troupe launch --workers 3 -- " + bin +
                       "/bench_allreduce --sizes 1024 --sizes 65536 --seconds 0.05 --transport " +
                       transport + " 2>/dev/null");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const auto& chief = r.last_json["chief"];
  REQUIRE(chief.is_object());
  CHECK(chief["ok"] == true);
  CHECK(chief["ranks"] == 3);
  CHECK(chief["checked_exact"] == 100003);
  if (transport == "tcp")
    CHECK(chief["shared_memory_links"] == 0);
  else if (std::filesystem::is_directory("/dev/shm"))
    CHECK(chief["shared_memory_links"] == 2);
  REQUIRE(chief["sizes"].size() == 2);
  for (const auto& s : chief["sizes"])
    CHECK(s["lat_us_median"].get<double>() > 0.0);
  for (const auto& t : r.last_json["tasks"])
    CHECK(t["exit"] == 0);
  check_all_gone(r.last_json["tasks"]);
}

// A port another process holds is no passing trouble: each task given one ends at once with
// a permanent failure naming the address (it was "unavailable", exit 138, and a restart
// loop), with the job's secret (the gate binds it) and without (CAF binds it).
TEST_CASE("a task whose port another process holds fails permanently, naming the address",
          "[example][ps]") {
  uint16_t held = 0;
  auto holder = troupe::net::listen_on("127.0.0.1", held);
  REQUIRE(holder.ok());
  const std::string at = "127.0.0.1:" + std::to_string(held);
  for (const std::string task : {"ps", "worker"})
    for (const std::string secret : {"", "TROUPE_CLUSTER_SECRET=0123456789abcdef0123 "}) {
      // The other tasks' ports are never dialled: this one ends before it serves.
      const std::string tf_config = R"({"cluster": {"chief": ["127.0.0.1:1"], "worker": [")" +
                                    (task == "worker" ? at : std::string("127.0.0.1:2")) +
                                    R"("], "ps": [")" +
                                    (task == "ps" ? at : std::string("127.0.0.1:3")) +
                                    R"("]}, "task": {"type": ")" + task + R"(", "index": 0}})";
      auto r =
          run_program("env " + secret + "TF_CONFIG='" + tf_config + "' " + bin + "/fmnist_ps 2>&1");
      INFO(task << (secret.empty() ? "" : " with a secret") << ": " << r.output);
      CHECK(r.exit_code == troupe::exit_permanent);
      REQUIRE(r.last_json.is_object());
      CHECK(r.last_json["retryable"] == false);
      CHECK_THAT(
          r.last_json["error"].get<std::string>(),
          Catch::Contains(at + " is in use by another process") && Catch::Contains(task + ":0"));
    }
}
