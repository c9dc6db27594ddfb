// Click-through-rate training end to end: ctr_datagen's files, ctr_ps under troupe launch
// with the embedding table sharded over two PS tasks, scored against the data's teacher.
#include <catch2/catch.hpp>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include "core/data/sparse_input.hpp"
#include "ctr_program.hpp"
#include "examples/ctr_data.hpp"
#include "fifo_feeder.hpp"
#include "helpers.hpp"
#include "launch_helpers.hpp"
#include "run_program.hpp"

using troupe::test::run_program;
namespace tc = troupe::core;

using namespace troupe::test::ctr;

TEST_CASE("ctr_datagen: Criteo text and TFRecord files read into the same batches",
          "[example][ctr]") {
  // Hashed buckets, and raw 64-bit ids from a vocabulary of 10^8 per field (keys for
  // dynamic tables): the same batches from both formats.
  for (const bool raw : {false, true}) {
    INFO("raw ids: " << raw);
    troupe::test::TempDir dir;
    auto r = run_program(bin + "/ctr_datagen --out " + dir.path() +
                         " --rows 3000 --heldout-rows 2000 --files 2 --buckets-per-field 1000" +
                         (raw ? " --raw-ids --vocab 100000000" : ""));
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    const auto& j = r.last_json;
    REQUIRE(j["ok"] == true);
    CHECK(j["raw_ids"] == raw);
    const double teacher = j["teacher_auc"].get<double>();
    CHECK(teacher > 0.7);  // the defaults give ~0.85: a model can learn something
    CHECK(teacher < 0.95);
    CHECK(std::abs(j["ctr"].get<double>() - 0.25) < 0.05);
    std::ifstream meta(dir.file("teacher.json"));
    CHECK(nlohmann::json::parse(meta)["teacher_auc"].get<double>() == teacher);

    tc::SparseInputOptions o;
    o.batch = 1000;
    o.epochs = 1;
    o.drop_remainder = false;
    o.criteo.buckets_per_field = 1000;
    o.criteo.raw_keys = raw;
    auto read_all = [&](tc::DataFormat format, const std::string& ext) {
      o.format = format;
      std::vector<tc::Batch> out;
      auto it = tc::sparse_input({dir.file("train-00000-of-00002" + ext),
                                  dir.file("train-00001-of-00002" + ext)},
                                 tc::InputContext{}, o)
                    .make_iterator();
      while (auto b = it->next())
        out.push_back(std::move(*b));
      return out;
    };
    const auto text = read_all(tc::DataFormat::criteo, ".txt");
    const auto records = read_all(tc::DataFormat::tfrecord, ".tfrecord");
    REQUIRE(text.size() == 3);
    REQUIRE(records.size() == 3);
    std::set<int64_t> distinct;
    for (size_t i = 0; i < text.size(); ++i) {
      CHECK(text[i].labels == records[i].labels);
      CHECK(text[i].ids == records[i].ids);
      CHECK(text[i].row_splits == records[i].row_splits);
      REQUIRE(text[i].features.shape() == records[i].features.shape());
      for (int64_t k = 0; k < text[i].features.size(); ++k)
        CHECK(text[i].features[k] == records[i].features[k]);
      distinct.insert(text[i].ids.begin(), text[i].ids.end());
    }
    if (raw) {
      // Zipf over 10^8 per field: most of the 78,000 ids are rare, many seen once; and
      // keys span 64 bits (no field offset bounds them).
      CHECK(distinct.size() > 20000);
      CHECK((*distinct.begin() < -(int64_t{1} << 60) && *distinct.rbegin() > (int64_t{1} << 60)));
    } else {
      CHECK(*distinct.rbegin() < 26 * 1000);
    }
  }
}

// The learning goal: DeepFM on 400k rows (26 fields, vocabularies up to 50, teacher AUC
// ~0.82) for 4 epochs, batch 512, Adagrad 0.2, reaches the teacher's held-out AUC within
// 0.01 (measured: 0.8119-0.8120 against 0.8189 over three seeds), and two workers reach the
// AUC one worker reaches with the same number of examples (measured 0.8117 vs 0.8107);
// fit() with the side-car evaluator reaches it too (0.8118).
TEST_CASE("ctr_ps and ctr_fit: DeepFM over 2 PS tasks learns to within 0.01 of the teacher's AUC",
          "[example][ctr]") {
  troupe::test::TempDir dir;
  const auto gen = generate(dir, "--rows 400000 --files 4 --vocab 50 --format criteo");
  const double teacher = gen["teacher_auc"].get<double>();
  const std::string args =
      "--batch 512 --hidden 64 --hidden 64 --dim 8 --buckets-per-field 4096 --lr 0.2 --cache";

  const auto two =
      launch_ctr(dir, "--ps 2 --workers 2",
                 args + " --steps-per-worker 1600 --export-every-steps 1000 --export " +
                     dir.file("fixed.tmodel"));
  INFO(two.dump());
  CHECK(two["teacher_auc"].get<double>() == teacher);
  CHECK(two["auc"].get<double>() >= teacher - 0.01);
  CHECK(two["eval_examples"] == 50000);
  CHECK(two["table_rows"] == 26 * 4096);
  CHECK(two["table_shards"] == 2);
  CHECK(two["shutdown_acknowledged"] == true);  // by every task, before the chief exited
  // Each step pulls the unique rows of its batch, not the table: at most 26 * 512.
  CHECK(two["rows_per_step"].get<double>() > 26);
  CHECK(two["rows_per_step"].get<double>() <= 26 * 512);
  REQUIRE(two["ps_tasks"].size() == 2);
  for (const auto& ps : two["ps_tasks"]) {
    CHECK(ps["rss_mb"].get<double>() > 1);
    CHECK(ps["updates_applied"].get<int64_t>() > 0);
  }

  // Exported from the live PS tasks while training and after it: the last export is the
  // model the chief scored.
  CHECK(two["export"]["during_training"].get<int64_t>() >= 3);  // at 1000, 2000 and 3000
  CHECK(two["export"]["failures"] == 0);
  CHECK(two["export"]["final"] == true);
  CHECK(two["export"]["rows"] == 26 * 4096);
  check_served(dir.file("fixed.tmodel"), dir.file("data") + "/heldout.txt", two);

  const auto one = launch_ctr(dir, "--ps 1 --workers 1", args + " --steps-per-worker 3200");
  INFO(one.dump());
  CHECK(one["examples"] == two["examples"]);
  CHECK(std::abs(one["auc"].get<double>() - two["auc"].get<double>()) < 0.005);

  // The same model with fit() (4 epochs of 800 steps, the table split over the 2 PS tasks)
  // and a side-car evaluator scoring each epoch's checkpoint; pulls and pushes as bf16.
  auto r = run_program(bin + "/troupe launch --ps 2 --workers 2 --evaluator --run-dir " +
                       dir.file("fit") + " -- " + bin + "/ctr_fit --data " + dir.file("data") +
                       " --wire-dtype bf16 2>/dev/null");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  troupe::test::check_all_gone(r.last_json["tasks"]);
  const auto& fit = r.last_json["chief"];
  CHECK(fit["ok"] == true);
  CHECK(fit["checkpoints"] == 4);
  CHECK(fit["val_auc"].get<double>() >= teacher - 0.01);
  CHECK(fit["wire_dtype"] == "bf16");
  CHECK(fit["ps_bf16_requests"].get<int64_t>() >= 2 * 3200);  // a pull and a push per step
  const auto& evaluations = r.last_json["evaluator"];
  REQUIRE(evaluations.size() == 5);  // one line per checkpoint, then the summary
  CHECK(evaluations[0]["step"] == 800);
  CHECK(evaluations[3]["step"] == 3200);
  CHECK(evaluations[0]["auc"].get<double>() < evaluations[3]["auc"].get<double>());
  // The evaluator scores the float32 checkpoint; fit's validation pulled the rows as bf16:
  // the same model, its values rounded (a run gave 0.81208 against 0.81207).
  const auto val_auc = Approx(fit["val_auc"].get<double>()).margin(2e-4);
  CHECK(evaluations[3]["auc"].get<double>() == val_auc);
  CHECK(evaluations[4]["auc"].get<double>() == val_auc);
}

TEST_CASE(
    "ctr_ps survives a killed worker, reads TFRecord input, keeps two table shards per PS, "
    "sends bf16 on the wire",
    "[example][ctr]") {
  troupe::test::TempDir dir;
  const auto gen = generate(dir,
                            "--rows 200000 --files 4 --vocab 50 --format tfrecord"
                            " --buckets-per-field 4096");
  const double teacher = gen["teacher_auc"].get<double>();
  const auto chief = launch_ctr(
      dir, "--ps 2 --workers 2 --restart-failed --chaos kill:worker:1@1500ms",
      "--format tfrecord --batch 512 --hidden 64 --dim 8 --buckets-per-field 4096 --lr 0.2 "
      "--steps-per-worker 1200 --partitioner max_size --shard-bytes 1048576 --wire-dtype bf16");
  INFO(chief.dump());
  CHECK(chief["workers_lost"].get<int64_t>() >= 1);
  CHECK(chief["steps"] == 2400);
  // 106,496 rows x 9 floats = 3.8 MB in shards of at most 1 MiB: 4, two on each PS task.
  CHECK(chief["table_shards"] == 4);
  // Pulls and pushes went as bf16 to every PS task (the restarted worker's too).
  CHECK(chief["wire_dtype"] == "bf16");
  for (const auto& ps : chief["ps_tasks"]) {
    CHECK(ps["shards"].get<int64_t>() >= 2);
    CHECK(ps["bf16_requests"].get<int64_t>() >= 2400);  // a pull and a push per step at least
  }
  CHECK(chief["auc"].get<double>() >= teacher - 0.02);  // 3 epochs of half the data
}

// A table without a fixed vocabulary on raw ids: the cap holds, rare keys wait for their
// second occurrence, rows are evicted, the PS tasks snapshot the table, and the model learns
// at least what a hashed table of the same rows learns (three runs on this data: dynamic
// 0.7252-0.7265, hashed 0.7227-0.7238).
// Found at 64 workers on this machine: 61 lines "tunnel ... refused ...: is another
// process's connection" (the chief's own CAF, whose connection had closed while it waited
// to be accepted), members dropped by the PS tasks' doors as unproven past 64, and at 128
// the job died on a PS that answered later than 3 s, its links to tasks that went
// unscheduled for over a second dropped. Not timed: on 2 cores it takes 15-60 s, and a
// loaded run is slow, not failed.
TEST_CASE("ctr_ps with 128 workers and 4 PS tasks on one machine completes and refuses no member",
          "[example][ctr][scale]") {
  troupe::test::TempDir dir;
  generate(dir, "--rows 64000 --files 16 --vocab 50 --buckets-per-field 1024 --format tfrecord");
  const auto chief = launch_ctr(dir, "--ps 4 --workers 128",
                                "--format tfrecord --batch 64 --dim 4 --hidden 8 "
                                "--buckets-per-field 1024 --steps-per-worker 32");
  INFO(chief.dump());
  CHECK(chief["workers"] == 128);
  CHECK(chief["steps"] == 128 * 32);
  CHECK(chief["examples"] == 128 * 32 * 64);
  // Slow to be scheduled is not lost: no worker's link to the chief dropped (before, CAF's
  // fixed 1 s link timeout dropped about half of them at start-up).
  CHECK(chief["workers_lost"] == 0);
  // (Not checked: that every one of the 132 tasks acknowledged the shutdown. Under other
  // load on the machine some do not within the chief's 6 s a step, and the launcher ends
  // them by id, as check_all_gone verifies.)
  // No door, gate or tunnel of any task turned a member away.
  int logs = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir.file("run"))) {
    if (entry.path().extension() != ".log") continue;
    ++logs;
    std::ifstream in(entry.path());
    std::string line;
    while (std::getline(in, line)) {
      INFO(entry.path().filename().string() << ": " << line);
      CHECK(line.find("refused") == std::string::npos);
    }
  }
  CHECK(logs == 1 + 4 + 128);
}

TEST_CASE("ctr_ps trains on streams until they end: a FIFO per worker and standard input",
          "[example][ctr]") {
  troupe::test::TempDir dir;
  generate(dir, "--rows 40000 --heldout-rows 5000 --files 2 --vocab 20000 --raw-ids");
  const auto files = troupe::examples::ctr_train_files(dir.file("data"), ".txt");
  REQUIRE(files.size() == 2);
  std::vector<std::string> text;
  for (const auto& f : files) {
    const auto bytes = troupe::test::read_bytes(f);
    text.emplace_back(bytes.begin(), bytes.end());
  }
  const std::string model =
      " --batch 500 --hidden 16 --dim 4 --lr 0.2 --table dynamic --max-rows 30000 "
      "--steps-per-worker 0 --stats-interval-ms 50 --heldout " +
      dir.file("data") + "/heldout.txt";
  // ctr_ps under troupe launch (1 PS, `workers` workers) with `data` after --data; every task
  // gone after it; the chief's JSON line.
  auto run = [&](const std::string& run_dir, int workers, const std::string& data) {
    auto r = run_program(bin + "/troupe launch --ps 1 --workers " + std::to_string(workers) +
                         " --run-dir " + dir.file(run_dir) + " -- " + bin + "/ctr_ps --data " +
                         data + " 2>/dev/null");
    INFO(r.output);
    REQUIRE(r.last_json.is_object());
    troupe::test::check_all_gone(r.last_json["tasks"]);
    return r.last_json["chief"];
  };
  auto check_trained = [&](const nlohmann::json& result, int64_t streams) {
    INFO(result.dump());
    REQUIRE(result["ok"] == true);
    CHECK(result["data_ended"] == true);
    // 20000 records a stream, 40 batches: the run ends with the first stream to end, so at
    // least one stream was read whole, and no step came from nowhere.
    CHECK(result["steps"].get<int64_t>() >= 40);
    CHECK(result["steps"].get<int64_t>() <= 40 * streams);
    CHECK(result["auc"].get<double>() > 0.6);
    CHECK(result["table_rows"].get<int64_t>() <= 30000);
    REQUIRE(result["ps_memory_over_time"].size() >= 1);
    for (const auto& sample : result["ps_memory_over_time"]) {
      CHECK(sample["table_rows"].get<int64_t>() <= 30000);
      CHECK(sample["ps_rss_bytes"].size() == 1);
    }
  };
  {
    troupe::test::FifoFeeder s0(dir.file("s-0"), {text[0]}), s1(dir.file("s-1"), {text[1]});
    REQUIRE(s0.made());
    REQUIRE(s1.made());
    const auto chief = run("r1", 2,
                           dir.file("s-{worker}") + model + " --export-every-steps 20 --export " +
                               dir.file("live.tmodel"));
    check_trained(chief, 2);
    // Exported from the live PS tasks during the stream and once it ended.
    CHECK(chief["export"]["during_training"].get<int64_t>() >= 1);
    CHECK(chief["export"]["final"] == true);
    CHECK(chief["export"]["rows"] == chief["table_rows"]);
    check_served(dir.file("live.tmodel"), dir.file("data") + "/heldout.txt", chief);
    // The run ends with the first stream to end: that one was read whole, the other may be
    // left part-way (its writer then fails, as the reader is gone). Seen in CI.
    const bool whole0 = s0.join(), whole1 = s1.join();
    CHECK((whole0 || whole1));
  }
  {
    // The launcher's standard input is the one worker's (a FIFO here, so that the test
    // starts no writer process); the chief and the PS task never read it.
    troupe::test::FifoFeeder in(dir.file("stdin"), {text[0]});
    REQUIRE(in.made());
    const auto chief = run("r2", 1, "-" + model + " < " + dir.file("stdin"));
    check_trained(chief, 1);
    CHECK(in.join());
  }
  {
    // An empty stream, and one stream for two workers: errors naming the input.
    troupe::test::FifoFeeder empty(dir.file("empty"), {});
    const auto chief = run("r3", 1, dir.file("empty") + model);
    CHECK(chief["ok"] == false);
    CHECK(chief["error"].get<std::string>().find(
              dir.file("empty") + ": the training data ended before the first step") !=
          std::string::npos);
    CHECK(empty.join());
    const auto shared = run("r4", 2, "-" + model + " < /dev/null");
    CHECK(shared["error"].get<std::string>().find(
              "standard input: one stream cannot feed 2 workers") != std::string::npos);
  }
}

// `troupe export --job` reads a job it did not start, from its run directory: tasks.json for
// the PS tasks, cluster-secret to join, ctr_model.json for the model's shape. One worker
// trains on a FIFO kept open after its 40 batches, so training stops where the data stops:
// the live export of that moment is the model the chief scores and exports at the end.
TEST_CASE("troupe export --job reads the model from a running job's PS tasks", "[example][ctr]") {
  using namespace std::chrono_literals;
  troupe::test::TempDir dir;
  generate(dir, "--rows 20000 --heldout-rows 5000 --files 1 --vocab 20000 --raw-ids");
  const auto files = troupe::examples::ctr_train_files(dir.file("data"), ".txt");
  REQUIRE(files.size() == 1);
  const auto bytes = troupe::test::read_bytes(files[0]);
  const std::string run_dir = dir.file("run");
  // Each try bounded (timeout(1) ends it by its id), so that one that hangs is seen.
  auto export_job = [&](const std::string& args) {
    return run_program("timeout -k 5 60 " + bin + "/troupe export --job " + run_dir + " " + args +
                       " 2>&1");
  };
  {
    // Before the job: no tasks.json to read, named.
    auto none = export_job("--out " + dir.file("x.tmodel"));
    CHECK(none.exit_code != 0);
    CHECK(none.last_json["ok"] == false);
    CHECK(none.last_json["error"].get<std::string>().find(run_dir + "/tasks.json") !=
          std::string::npos);
  }
  std::atomic<bool> release{false};
  troupe::test::FifoFeeder feed(
      dir.file("stream"), {std::string(bytes.begin(), bytes.end()), ""},
      [&](size_t) { return release.load(); }, 420s);
  REQUIRE(feed.made());
  troupe::test::ChildProcess launch(
      {"/bin/sh", "-c",
       "exec " + bin + "/troupe launch --ps 2 --workers 1 --run-dir " + run_dir + " -- " + bin +
           "/ctr_ps --data " + dir.file("stream") +
           " --batch 500 --hidden 16 --dim 4 --lr 0.2 --table dynamic --max-rows 30000 "
           "--steps-per-worker 0 --heldout " +
           dir.file("data") + "/heldout.txt --export " + dir.file("final.tmodel")},
      {});
  struct Release {  // on every way out: the stream ends, so the job does
    std::atomic<bool>& flag;
    troupe::test::FifoFeeder& feed;
    ~Release() {
      flag = true;
      feed.poke();
    }
  } release_at_exit{release, feed};

  // Read live until the 40 steps are in (each pushes once to every shard) and nothing was
  // applied during the read.
  // The bound is generous: under the sanitizers on two shared cores the job's start and its
  // 40 steps alone have taken over 90 s. It stays under the test's own limit (300 s), so
  // that a run that never gets there says where it stood.
  nlohmann::json live;
  std::string last_try;
  int tries = 0;
  const auto deadline = std::chrono::steady_clock::now() + 200s;
  while (std::chrono::steady_clock::now() < deadline) {
    ++tries;
    auto r = export_job("--out " + dir.file("live.tmodel"));
    last_try = r.output;
    if (r.exit_code == 0 && r.last_json["updates_during_read"] == 0 &&
        r.last_json["updates_applied"] == 40 * r.last_json["shards"].get<int64_t>()) {
      live = r.last_json;
      break;
    }
  }
  INFO("export tries: " << tries << "; the last: " << last_try);
  REQUIRE(live.is_object());
  CHECK(live["source"] == "live");
  CHECK(live["table"] == "dynamic");
  CHECK(live["ps_tasks"] == 2);
  CHECK(live["rows"].get<int64_t>() > 0);
  {
    // A table the job does not have, and a min count filter, on the running job.
    auto wrong = export_job("--out " + dir.file("w.tmodel") + " --table-variable nope");
    CHECK(wrong.exit_code != 0);
    CHECK(wrong.last_json["error"].get<std::string>().find("no variable 'nope'") !=
          std::string::npos);
    auto small = export_job("--out " + dir.file("s.tmodel") + " --min-count 2");
    INFO(small.output);
    REQUIRE(small.exit_code == 0);
    CHECK(small.last_json["rows"].get<int64_t>() < live["rows"].get<int64_t>());
  }

  // The stream ends, the job ends: the chief's own export after join() is the same model.
  release = true;
  feed.poke();
  REQUIRE(feed.join());
  auto status = launch.wait_exit(120s);
  REQUIRE(status.has_value());
  const auto result = troupe::test::last_json_line_of(launch.captured_stdout());
  INFO(result.dump());
  REQUIRE(result.is_object());
  troupe::test::check_all_gone(result["tasks"]);
  const auto& chief = result["chief"];
  REQUIRE(chief["ok"] == true);
  CHECK(chief["steps"] == 40);
  CHECK(chief["export"]["rows"] == live["rows"]);
  CHECK(troupe::test::read_bytes(dir.file("live.tmodel")) ==
        troupe::test::read_bytes(dir.file("final.tmodel")));
  check_served(dir.file("live.tmodel"), dir.file("data") + "/heldout.txt", chief);
}

TEST_CASE("ctr_ps on a damaged TFRecord file ends with an error naming the file and record",
          "[example][ctr]") {
  troupe::test::TempDir dir;
  generate(dir,
           "--rows 20000 --files 2 --vocab 50 --format tfrecord"
           " --buckets-per-field 4096");
  const std::string damaged = dir.file("data/train-00001-of-00002.tfrecord");
  auto bytes = troupe::test::read_bytes(damaged);
  bytes[bytes.size() / 2] ^= 0x5a;  // inside some record's data
  troupe::test::write_bytes(damaged, bytes);
  auto r = run_program(bin + "/troupe launch --ps 2 --workers 2 --run-dir " + dir.file("run") +
                       " -- " + bin + "/ctr_ps --data " + dir.file("data") +
                       " --format tfrecord --batch 256 --hidden 16 --dim 4"
                       " --buckets-per-field 4096 --steps-per-worker 100 2>/dev/null");
  INFO(r.output);
  CHECK(r.exit_code != 0);
  REQUIRE(r.last_json.is_object());
  troupe::test::check_all_gone(r.last_json["tasks"]);
  const auto& chief = r.last_json["chief"];
  CHECK(chief["ok"] == false);
  const std::string error = chief["error"].get<std::string>();
  CHECK(error.find(damaged + ": record ") != std::string::npos);
  CHECK(error.find("CRC mismatch") != std::string::npos);
}

// Launched with workers only, ctr_fit (a PS program) has no chief: every task says so and
// ends (it served forever, silently).
TEST_CASE("ctr_fit and ctr_ps without a chief end at once, saying why", "[example][ctr]") {
  troupe::test::TempDir dir;
  for (const std::string program : {"ctr_fit", "ctr_ps"}) {
    auto r =
        run_program(bin + "/troupe launch --workers 2 --run-dir " + dir.file(program) + " -- " +
                    bin + "/" + program + " --data " + dir.file("none") + " 2>/dev/null");
    INFO(r.output);
    CHECK(r.exit_code != 0);
    REQUIRE(r.last_json.is_object());
    troupe::test::check_all_gone(r.last_json["tasks"]);
    const auto& lead = r.last_json["chief"];
    REQUIRE(lead.is_object());
    CHECK(lead["ok"] == false);
    CHECK(lead["retryable"] == false);
    CHECK_THAT(lead["error"].get<std::string>(),
               Catch::Contains("task worker:0: TF_CONFIG's cluster has no chief task"));
    const auto other = troupe::test::last_json_line(dir.file(program + "/worker-1.log"));
    CHECK_THAT(other["error"].get<std::string>(), Catch::Contains("no chief task"));
  }
}
