// fit() with a ParameterServerStrategy on a real cluster (one PS, two worker processes; the
// test is the chief): epoch-level callbacks, a chief killed and resumed through
// BackupAndRestore, distributed evaluation counted exactly once when a worker dies.
#include <catch2/catch.hpp>

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
  CHECK(direct->accuracy() > 0.9);
  CHECK(h->epochs[0].at("val_accuracy") == direct->accuracy());
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
  CHECK(again->correct == direct->correct);
  CHECK(again->loss_sum == direct->loss_sum);
  REQUIRE(model.coordinator_if_made() != nullptr);
  CHECK(model.coordinator_if_made()->wait_for_stats(
      [](const CoordinatorStats& s) { return s.workers_lost == 1; }, 10s));
  model.coordinator_if_made()->shutdown_cluster();
}

TEST_CASE("fit a CTR model with its table split over two PS tasks, AUC counted once",
          "[process][fit][ctr]") {
  test::LocalCluster cluster(2, 2);  // children: ps:0, ps:1, worker:0, worker:1
  const auto reg = test::make_test_registry();
  FitOptions o;
  o.epochs = 2;
  o.steps_per_epoch = 30;
  o.validation = FitOptions::Validation::distributed;
  o.coordinator.closure_timeout = 10s;
  Model model(test::ctr_model());
  auto strategy = ParameterServerStrategy::make(cluster.chief(),
                                                std::make_shared<core::FixedShardsPartitioner>(2));
  REQUIRE(strategy.ok());
  auto h = fit(model, **strategy, {&reg, "clicks_repeat"}, o);
  REQUIRE(h.ok());
  const auto& last = h->epochs.back();
  REQUIRE(last.count("val_auc") == 1);
  CHECK(last.at("val_auc") > 0.72);
  // The workers pulled and pushed rows of the table's two shards, one on each PS task.
  auto ps = (*strategy)->ps_stats();
  REQUIRE(ps.ok());
  REQUIRE(ps->size() == 2);
  for (const auto& p : *ps)
    CHECK(p.updates_applied > 0);
  // Distributed validation (workers pull the rows of each evaluation batch) equals the
  // chief's own evaluation of the same variables (it reads the whole table).
  auto direct = model.evaluate();
  REQUIRE(direct.ok());
  CHECK(direct->examples == 1024);
  CHECK(last.at("val_auc") == Approx(direct->auc()));
  CHECK(last.at("val_loss") == Approx(direct->loss()));
  model.coordinator_if_made()->shutdown_cluster();
}
