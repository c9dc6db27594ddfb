// fit() with a ParameterServerStrategy on a real cluster (one PS, two worker processes; the
// test is the chief): epoch-level callbacks, a chief killed and resumed through
// BackupAndRestore, distributed evaluation counted exactly once when a worker dies.
#include <catch2/catch.hpp>

#include <algorithm>

#include "cluster_fixture.hpp"
#include "helpers.hpp"
#include "job/job_registry.hpp"

using namespace troupe;
using namespace std::chrono_literals;

namespace {

class FailAfterEpoch : public Callback {
 public:
  explicit FailAfterEpoch(int64_t epoch) : epoch_(epoch) {}
  core::Status on_epoch_end(FitState& s, const Logs&) override {
    if (s.epoch == epoch_) return core::make_error(core::Errc::cancelled, "chief killed");
    return {};
  }

 private:
  int64_t epoch_;
};

// The CTR tests' fit: 2 epochs of 30 steps, validated on the workers.
FitOptions ctr_fit_options() {
  FitOptions o;
  o.epochs = 2;
  o.steps_per_epoch = 30;
  o.validation = FitOptions::Validation::distributed;
  o.coordinator.closure_timeout = 10s;
  return o;
}

// The built-in CTR model's table, as its Keras form names it, and its keys in a checkpoint.
const std::string kTable = "embedding/embeddings";
const std::string kKeys = kTable + "/keys";

// Fits `model` on `dataset` and checks that validation learned the clicks' teacher.
void fit_clicks(Model& model, ParameterServerStrategy& strategy, const Registry& reg,
                const char* dataset, const Callbacks& callbacks, History& h) {
  auto fitted = fit(model, strategy, {&reg, dataset}, ctr_fit_options(), callbacks);
  REQUIRE(fitted.ok());
  h = std::move(*fitted);
  REQUIRE(h.epochs.back().count("val_auc") == 1);
  CHECK(h.epochs.back().at("val_auc") > 0.72);
}

}  // namespace

TEST_CASE("fit with a ParameterServerStrategy: resume, checkpoints, distributed evaluation",
          "[process][fit]") {
  test::LocalCluster cluster(1, 2);  // children: ps:0, worker:0, worker:1
  const auto reg = test::make_test_registry();
  const auto resolver = cluster.chief();
  test::TempDir dir;
  FitOptions o;
  o.epochs = 3;
  o.steps_per_epoch = 20;
  o.steps_per_execution = 2;
  o.validation = FitOptions::Validation::distributed;
  o.coordinator.closure_timeout = 10s;

  {
    // Declared before its strategy, the model outlives it at the end of this block: the
    // strategy must end the model's coordinator first, or its actor system waits forever.
    Model model(test::blobs_model());
    auto strategy = ParameterServerStrategy::make(resolver);
    REQUIRE(strategy.ok());
    FitOptions no_steps = o;
    no_steps.steps_per_epoch = 0;
    auto refused = fit(model, **strategy, {&reg, "blobs_repeat"}, no_steps);
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.error().message.find("steps_per_epoch is required") != std::string::npos);

    // The first chief dies after its second epoch (after the backup of that epoch).
    auto backup = std::make_shared<callbacks::BackupAndRestoreCallback>(dir.file("backup"));
    auto h = fit(model, **strategy, {&reg, "blobs_repeat"}, o,
                 {backup, std::make_shared<FailAfterEpoch>(1)});
    REQUIRE_FALSE(h.ok());
    CHECK(h.error().message == "chief killed");
    CHECK(backup->backups() == 2);
  }

  // The restarted chief: a new strategy and model against the PS task that kept running.
  auto strategy = ParameterServerStrategy::make(resolver);
  REQUIRE(strategy.ok());
  Model model(test::blobs_model());
  auto backup = std::make_shared<callbacks::BackupAndRestoreCallback>(dir.file("backup"));
  auto ckpt = std::make_shared<callbacks::ModelCheckpoint>(dir.file("ckpt"));
  auto h = fit(model, **strategy, {&reg, "blobs_repeat"}, o, {backup, ckpt});
  REQUIRE(h.ok());
  CHECK(backup->resumed());
  CHECK(h->initial_epoch == 2);
  CHECK(h->initial_step == 40);
  REQUIRE(h->epochs.size() == 1);
  CHECK(h->steps == 60);
  CHECK(h->steps_run == 20);
  CHECK(h->stats.scheduled == 10 + 4);  // 20 steps in closures of 2; 4 evaluation batches
  CHECK(h->stats.completed == h->stats.scheduled);
  CHECK(ckpt->saves() == 1);

  // Distributed validation equals the chief's own evaluation of the same variables.
  auto direct = model.evaluate();
  REQUIRE(direct.ok());
  CHECK(direct->examples == 256);
  CHECK(test::accuracy(model, *direct) > 0.9);
  CHECK(h->epochs[0].at("val_accuracy") == test::accuracy(model, *direct));
  CHECK(h->epochs[0].at("val_loss") == direct->loss());
  // The checkpoint holds the variables as the PS tasks have them.
  auto saved = core::read_checkpoint(dir.file("ckpt/ckpt-60.tckpt"));
  REQUIRE(saved.ok());
  Model from_ckpt(test::blobs_model());
  REQUIRE(from_ckpt.set_weights(*saved).ok());
  CHECK(from_ckpt.evaluate().value().loss() == direct->loss());

  // A worker killed with evaluation closures in flight: its batches run again on the other
  // worker, and every batch counts once.
  cluster.child(2)->kill(SIGKILL);
  auto again = model.evaluate_distributed();
  REQUIRE(again.ok());
  CHECK(again->examples == 256);
  CHECK(again->batches == 4);
  CHECK(model.logs(*again) == model.logs(*direct));
  CHECK(again->loss_sum == direct->loss_sum);
  REQUIRE(model.coordinator_if_made() != nullptr);
  CHECK(model.coordinator_if_made()->wait_for_stats(
      [](const CoordinatorStats& s) { return s.workers_lost == 1; }, 10s));
  model.coordinator_if_made()->shutdown_cluster();
}

TEST_CASE(
    "fit a Keras model given in C++ with its own dataset under a ParameterServerStrategy, "
    "validated on the workers",
    "[process][fit][keras]") {
  test::LocalCluster cluster(1, 2);  // children: ps:0, worker:0, worker:1
  const auto reg = test::make_test_registry();
  Model model(test::blobs_model());
  REQUIRE(model.status().ok());
  auto strategy = ParameterServerStrategy::make(cluster.chief());
  REQUIRE(strategy.ok());
  FitOptions o;
  o.epochs = 2;
  o.steps_per_epoch = 20;
  o.validation = FitOptions::Validation::distributed;
  o.coordinator.closure_timeout = 10s;
  auto h = fit(model, **strategy, {&reg, "blobs_repeat"}, o);
  REQUIRE(h.ok());
  CHECK(h->stats.scheduled == 2 * (20 + 4));  // each epoch: 20 steps, 4 validation batches
  CHECK(h->stats.completed == h->stats.scheduled);

  // Distributed validation equals the chief's own evaluation of the same variables.
  auto direct = model.evaluate();
  REQUIRE(direct.ok());
  CHECK(direct->examples == 256);
  CHECK(direct->batches == 4);
  const auto direct_logs = model.logs(*direct, "val_");
  REQUIRE(direct_logs.count("val_accuracy") == 1);
  CHECK(direct_logs.at("val_accuracy") > 0.9);
  CHECK(h->epochs.back().at("val_accuracy") == direct_logs.at("val_accuracy"));
  CHECK(h->epochs.back().at("val_loss") == direct_logs.at("val_loss"));

  // A worker killed with validation closures in flight: its batches run again on the
  // other worker, and every batch counts once.
  cluster.child(2)->kill(SIGKILL);
  auto again = model.evaluate_distributed();
  REQUIRE(again.ok());
  CHECK(again->examples == 256);
  CHECK(again->batches == 4);
  CHECK(again->loss_sum == direct->loss_sum);
  CHECK(model.logs(*again, "val_") == direct_logs);
  REQUIRE(model.coordinator_if_made() != nullptr);
  CHECK(model.coordinator_if_made()->wait_for_stats(
      [](const CoordinatorStats& s) { return s.workers_lost == 1; }, 10s));
  model.coordinator_if_made()->shutdown_cluster();
}

TEST_CASE("fit a CTR model with its table split over two PS tasks, AUC counted once",
          "[process][fit][ctr]") {
  test::LocalCluster cluster(2, 2);  // children: ps:0, ps:1, worker:0, worker:1
  const auto reg = test::make_test_registry();
  test::TempDir dir;
  const ModelSpec spec = test::ctr_model();
  Model model(spec);
  auto strategy = ParameterServerStrategy::make(cluster.chief(),
                                                std::make_shared<core::FixedShardsPartitioner>(2));
  REQUIRE(strategy.ok());
  auto checkpoint = std::make_shared<callbacks::ModelCheckpoint>(dir.file("ckpt"));
  History h;
  fit_clicks(model, **strategy, reg, "clicks_repeat", {checkpoint}, h);
  const auto& last = h.epochs.back();
  // The workers pulled and pushed rows of the table's two shards, one on each PS task.
  auto ps = (*strategy)->ps_stats();
  REQUIRE(ps.ok());
  REQUIRE(ps->size() == 2);
  for (const auto& p : *ps)
    CHECK(p.updates_applied > 0);
  // Distributed validation (workers pull the rows of each evaluation batch) equals the
  // chief's own evaluation of the same variables (it reads each batch's rows too).
  auto direct = model.evaluate();
  REQUIRE(direct.ok());
  CHECK(direct->examples == 1024);
  const auto direct_logs = model.logs(*direct);
  CHECK(last.at("val_auc") == Approx(direct_logs.at("auc")));
  CHECK(last.at("val_loss") == Approx(direct_logs.at("loss")));
  // Through fit, evaluation and checkpoints the chief never held the table.
  const auto& params = model.parameters();
  const auto held = std::find_if(params.begin(), params.end(),
                                 [](const core::Parameter& p) { return p.name == kTable; });
  REQUIRE(held != params.end());
  CHECK(held->value->size() <= 1);  // a default tensor, no rows
  CHECK(model.weights().tensors.count(kTable) == 0);
  // The last checkpoint holds the whole table as the PS tasks have it; a model set from it
  // (a side-car evaluator's, no PS tasks) scores the same.
  core::CheckpointManager manager(dir.file("ckpt"), 3);
  auto saved = manager.restore_latest();
  REQUIRE(saved.ok());
  const core::Checkpoint& ckpt = saved->second;
  REQUIRE(ckpt.tensors.count(kTable) == 1);
  const auto& variables = model.variables();
  const auto table = std::find_if(variables.begin(), variables.end(),
                                  [](const Variable& v) { return v.name == kTable; });
  REQUIRE(table != variables.end());
  const int64_t width = test::clicks_config().row_width();
  CHECK(ckpt.tensors.at(kTable).shape() == core::Shape{64, width});
  const core::Tensor on_ps = (*strategy)->read(*table).value();
  REQUIRE(on_ps.size() == ckpt.tensors.at(kTable).size());
  for (int64_t i = 0; i < on_ps.size(); ++i)
    CHECK(on_ps[i] == ckpt.tensors.at(kTable)[i]);
  Model loaded(spec);
  core::Checkpoint short_table = ckpt;
  short_table.tensors[kTable] = core::Tensor(core::Shape{3, width});
  CHECK_THAT(loaded.set_weights(short_table).error().message, Catch::Contains(kTable));
  REQUIRE(loaded.set_weights(ckpt).ok());
  auto reloaded = loaded.evaluate();
  REQUIRE(reloaded.ok());
  const auto reloaded_logs = loaded.logs(*reloaded);
  CHECK(reloaded_logs.at("loss") == Approx(direct_logs.at("loss")).epsilon(1e-6));
  CHECK(reloaded_logs.at("auc") == Approx(direct_logs.at("auc")).epsilon(1e-6));
  model.coordinator_if_made()->shutdown_cluster();
}

TEST_CASE("fit a CTR model whose table is dynamic: rows by key, checkpoint and reload score alike",
          "[process][fit][ctr][dynamic]") {
  test::LocalCluster cluster(2, 2);  // children: ps:0, ps:1, worker:0, worker:1
  const auto reg = test::make_test_registry();
  test::TempDir dir;
  const ModelSpec spec = test::ctr_keyed_model();

  // In one process it is refused: the table lives on PS tasks.
  Model alone(spec);
  auto refused = fit(alone, {&reg, "keyed_clicks_repeat"}, ctr_fit_options());
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().message.find("dynamic tables") != std::string::npos);

  Model model(spec);
  auto strategy = ParameterServerStrategy::make(cluster.chief());
  REQUIRE(strategy.ok());
  auto checkpoint = std::make_shared<callbacks::ModelCheckpoint>(dir.file("ckpt"));
  History h;
  fit_clicks(model, **strategy, reg, "keyed_clicks_repeat", {checkpoint}, h);
  const auto& last = h.epochs.back();
  // One shard a PS task, each holding rows of the 64 keys the clicks use.
  auto ps = (*strategy)->ps_stats();
  REQUIRE(ps.ok());
  REQUIRE(ps->size() == 2);
  int64_t rows = 0;
  for (const auto& p : *ps) {
    CHECK(p.table_rows > 0);
    CHECK(p.updates_applied > 0);
    rows += p.table_rows;
  }
  CHECK(rows == 64);

  // The chief reads each evaluation batch's rows by key: the same as the workers' scores.
  auto direct = model.evaluate();
  REQUIRE(direct.ok());
  CHECK(direct->examples == 1024);
  const auto direct_logs = model.logs(*direct);
  CHECK(last.at("val_auc") == Approx(direct_logs.at("auc")));
  CHECK(last.at("val_loss") == Approx(direct_logs.at("loss")));

  // The last checkpoint holds the rows with their keys; a model loaded from it (no PS
  // tasks, as a side-car evaluator) scores the same.
  core::CheckpointManager manager(dir.file("ckpt"), 3);
  auto saved = manager.restore_latest();
  REQUIRE(saved.ok());
  const core::Checkpoint& ckpt = saved->second;
  REQUIRE(ckpt.ints.count(kKeys) == 1);
  CHECK(ckpt.ints.at(kKeys).size() == 64);
  CHECK(ckpt.tensors.at(kTable).shape() == core::Shape{64, test::clicks_config().row_width()});
  Model loaded(spec);
  REQUIRE(loaded.set_weights(ckpt).ok());
  auto reloaded = loaded.evaluate();
  REQUIRE(reloaded.ok());
  const auto reloaded_logs = loaded.logs(*reloaded);
  CHECK(reloaded_logs.at("loss") == Approx(direct_logs.at("loss")).epsilon(1e-6));
  CHECK(reloaded_logs.at("auc") == Approx(direct_logs.at("auc")).epsilon(1e-6));
  CHECK(loaded.weights().ints.at(kKeys) == ckpt.ints.at(kKeys));

  // Without a key's row, its examples score with zeros there: the loss moves.
  core::Checkpoint fewer = ckpt;
  fewer.ints[kKeys].pop_back();
  auto bad = loaded.set_weights(fewer);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().message.find("a key per row") != std::string::npos);
  fewer.ints[kKeys] = ckpt.ints.at(kKeys);
  fewer.ints[kKeys][1] = fewer.ints[kKeys][0];
  bad = loaded.set_weights(fewer);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().message.find("twice") != std::string::npos);
  fewer.ints[kKeys][1] = 12345;  // not a key the clicks use
  REQUIRE(loaded.set_weights(fewer).ok());
  auto partial = loaded.evaluate();
  REQUIRE(partial.ok());
  CHECK(loaded.logs(*partial).at("loss") != Approx(direct_logs.at("loss")).epsilon(1e-6));
  model.coordinator_if_made()->shutdown_cluster();
}
