// Embedding tables of ctr_ps on the PS tasks: rows interleaved over the tasks for ids
// ranked by frequency, and a dynamic table against a hashed one on the same data.
#include <catch2/catch.hpp>

#include <cstdint>

#include "ctr_program.hpp"
#include "helpers.hpp"
#include "run_program.hpp"

using troupe::test::run_program;
using namespace troupe::test::ctr;

TEST_CASE("ctr_ps with interleaved rows spreads ids ranked by frequency over the PS tasks",
          "[example][ctr]") {
  // Ids ranked by frequency: the hottest are the table's first rows. In runs of rows
  // (TensorFlow's layout) they load ps:0; interleaved, both tasks alike. The interleaved
  // model, exported from the PS snapshots, scores the held-out file as the chief did.
  troupe::test::TempDir dir;
  generate(dir,
           "--rows 20000 --heldout-rows 5000 --files 2 --vocab 1000 "
           "--buckets-per-field 1024 --format tfrecord --ranked-ids");
  const std::string common =
      "--format tfrecord --buckets-per-field 1024 --batch 256 --steps-per-worker 150 ";
  const auto range = launch_ctr(dir, "--ps 2 --workers 2", common + "--shard-rows range");
  const auto spread = launch_ctr(dir, "--ps 2 --workers 2",
                                 common + "--shard-rows interleaved --ps-snapshot-dir " +
                                     dir.file("snap") + " --ps-snapshot-interval-ms 200");
  INFO(range.dump());
  INFO(spread.dump());
  for (const auto* run : {&range, &spread}) {
    REQUIRE((*run)["ps_load"].size() == 2);
    for (const auto& ps : (*run)["ps_load"]) {
      CHECK(ps["rows_pulled"].get<int64_t>() > 0);
      CHECK(ps["bytes_pulled"].get<int64_t>() >= 4 * ps["rows_pulled"].get<int64_t>());
    }
  }
  CHECK(range["ps_load_balance"].get<double>() > 1.3);
  CHECK(spread["ps_load_balance"].get<double>() < 1.2);
  CHECK(spread["auc"].get<double>() > 0.65);
  REQUIRE(spread["final_snapshot"] == true);
  auto exported = run_program(bin + "/troupe export --checkpoint " + dir.file("snap") + " --out " +
                              dir.file("m.tmodel") + " 2>&1");
  INFO(exported.output);
  REQUIRE(exported.exit_code == 0);
  check_served(dir.file("m.tmodel"), dir.file("data") + "/heldout.tfrecord", spread);
}

TEST_CASE("ctr_ps with a dynamic table keeps under its row cap and learns as a hashed table",
          "[example][ctr]") {
  troupe::test::TempDir dir;
  generate(dir, "--rows 200000 --files 2 --vocab 50000 --raw-ids --format both");
  const std::string common =
      "--batch 512 --hidden 32 --dim 8 --lr 0.2 --cache --steps-per-worker 400 ";
  // Same rows, same data: the TFRecord files' raw keys, here in a dynamic table, below
  // hashed into 2048 buckets a field.
  const auto dynamic =
      launch_ctr(dir, "--ps 2 --workers 2",
                 common +
                     "--format tfrecord --table dynamic --max-rows 53248 --min-count 2 "
                     "--ttl-steps 400 --ps-snapshot-dir " +
                     dir.file("snap") + " --ps-snapshot-interval-ms 200");
  INFO(dynamic.dump());
  CHECK(dynamic["table"] == "dynamic");
  CHECK(dynamic["table_rows"].get<int64_t>() <= 53248);
  CHECK(dynamic["table_rows"].get<int64_t>() > 40000);
  CHECK(dynamic["rows_admitted"].get<int64_t>() > dynamic["table_rows"].get<int64_t>());
  CHECK(dynamic["rows_evicted"] ==
        dynamic["rows_admitted"].get<int64_t>() - dynamic["table_rows"].get<int64_t>());
  CHECK(dynamic["grads_dropped_unadmitted"].get<int64_t>() > 0);
  REQUIRE(dynamic["ps_rss_bytes"].size() == 2);
  for (const auto& ps : dynamic["ps_tasks"]) {
    CHECK(ps["snapshots"].get<int64_t>() >= 1);
    CHECK(ps["table_rows"].get<int64_t>() > 0);
  }

  // The model served from the PS snapshots scores the held-out file as the chief did.
  REQUIRE(dynamic["final_snapshot"] == true);
  auto exported = run_program(bin + "/troupe export --checkpoint " + dir.file("snap") + " --out " +
                              dir.file("m.tmodel") + " 2>&1");
  INFO(exported.output);
  REQUIRE(exported.exit_code == 0);
  CHECK(exported.last_json["rows"] == dynamic["table_rows"]);
  check_served(dir.file("m.tmodel"), dir.file("data") + "/heldout.tfrecord", dynamic);
  // Rows seen at least 3 times, in bf16: a smaller model that scores about as well.
  auto small = run_program(bin + "/troupe export --checkpoint " + dir.file("snap") + " --out " +
                           dir.file("s.tmodel") + " --min-count 3 --bf16 2>&1");
  INFO(small.output);
  REQUIRE(small.exit_code == 0);
  CHECK(small.last_json["rows"].get<int64_t>() < exported.last_json["rows"].get<int64_t>());
  CHECK(small.last_json["bytes"].get<int64_t>() * 2 < exported.last_json["bytes"].get<int64_t>());
  auto scored =
      run_program(bin + "/troupe predict --model " + dir.file("s.tmodel") + " --data " +
                  dir.file("data") + "/heldout.txt --format criteo --latency-samples 50 2>&1");
  INFO(scored.output);
  REQUIRE(scored.exit_code == 0);
  CHECK(scored.last_json["auc"].get<double>() > dynamic["auc"].get<double>() - 0.01);
  CHECK(scored.last_json["latency_samples"] == 50);
  CHECK(scored.last_json["latency_us_p99"].get<double>() >=
        scored.last_json["latency_us_p50"].get<double>());
  // The same TFRecord files in a fixed table: raw keys hashed into 2048 buckets a field.
  const auto hashed =
      launch_ctr(dir, "--ps 2 --workers 2",
                 common + "--format tfrecord --table fixed --buckets-per-field 2048");
  INFO(hashed.dump());
  CHECK(hashed["table_rows"] == 53248);
  CHECK(dynamic["auc"].get<double>() >= hashed["auc"].get<double>() - 0.002);
  CHECK(hashed["auc"].get<double>() > 0.7);  // the hashed table learned from the raw keys

  // A dynamic table under fit() (troupe::Model): the chief reads it whole only to write a
  // checkpoint (keys and rows), and the side-car evaluator scores each checkpoint's rows as
  // the workers scored the live table in validation.
  auto r = run_program(bin + "/troupe launch --ps 2 --workers 2 --evaluator --run-dir " +
                       dir.file("fit") + " -- " + bin + "/ctr_fit --data " + dir.file("data") +
                       " --hidden 32 --table dynamic --max-rows 20000 --min-count 2 --epochs 2 "
                       "--steps-per-epoch 200 --export " +
                       dir.file("fit.tmodel") + " 2>/dev/null");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  troupe::test::check_all_gone(r.last_json["tasks"]);
  const auto& fit = r.last_json["chief"];
  CHECK(fit["table"] == "dynamic");
  CHECK(fit["checkpoints"] == 2);
  CHECK(fit["table_rows"].get<int64_t>() <= 20000);
  CHECK(fit["rows_evicted"].get<int64_t>() > 0);
  CHECK(fit["rows_evicted"] ==
        fit["rows_admitted"].get<int64_t>() - fit["table_rows"].get<int64_t>());
  CHECK(fit["val_auc"].get<double>() > 0.65);
  const auto& evaluations = r.last_json["evaluator"];
  REQUIRE(evaluations.size() == 3);  // one line per checkpoint, then the summary
  CHECK(evaluations[1]["step"] == 400);
  CHECK(evaluations[1]["auc"].get<double>() == Approx(fit["val_auc"].get<double>()).margin(1e-6));
  // Its export, served, scores the held-out file as validation did (fit's AUC comes from
  // 200-bucket histograms, predict's from exact ranks: the losses are the sharp check).
  CHECK(fit["export"]["rows"] == fit["table_rows"]);
  auto served = run_program(bin + "/troupe predict --model " + dir.file("fit.tmodel") + " --data " +
                            dir.file("data") + "/heldout.txt 2>&1");
  INFO(served.output);
  REQUIRE(served.exit_code == 0);
  CHECK(served.last_json["examples"] == 50000);
  CHECK(served.last_json["logloss"].get<double>() ==
        Approx(fit["val_loss"].get<double>()).epsilon(1e-5));
  CHECK(served.last_json["auc"].get<double>() == Approx(fit["val_auc"].get<double>()).margin(2e-3));
}
