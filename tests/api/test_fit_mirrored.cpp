// fit() with a MultiWorkerMirroredStrategy, the replicas run as threads of this process on
// loopback: the replicas stay equal and match one process training on the global batch;
// the logs are the global batch's on every replica; only the chief writes; a replica's
// error ends fit() on all of them; BackupAndRestore resumes the whole job to the same
// weights as a run that was never stopped.
#include <filesystem>
#include <fstream>
#include <future>

#include <catch2/catch.hpp>

#include "helpers.hpp"
#include "job/job_registry.hpp"
#include "process.hpp"

using namespace troupe;
namespace fs = std::filesystem;

namespace {

// "blobs_train" (each replica's shard in batches of 32) and "blobs_64" (all 512 examples
// in order, in batches of 64): replica r's batch j holds examples 64j + 2k + r, so the two
// replicas' batch j together are exactly batch j of "blobs_64".
Registry data_registry() {
  Registry r;
  test::add_blobs_datasets(r);
  r.add_dataset("blobs_64", [](const core::InputContext&) {
    return core::from_vector(test::blobs(512, 1)).batch(64, true).map(test::blobs_columns);
  });
  return r;
}

std::vector<float> flat_values(Model& m) {
  std::vector<float> out;
  for (auto& p : m.parameters())
    out.insert(out.end(), p.value->data(), p.value->data() + p.value->size());
  return out;
}

struct ReplicaRun {
  core::Expected<History> history = core::make_error(core::Errc::internal, "not run");
  std::vector<float> weights;
  BatchStats evaluation;
};

// Runs `n` replicas as threads, each its own strategy (workers on loopback ports) and
// model; `callbacks(i)` gives replica i's callbacks.
std::vector<ReplicaRun> run_replicas(int n, const ModelSpec& spec, const Registry& reg,
                                     const std::string& dataset, const FitOptions& o,
                                     const std::function<Callbacks(int)>& callbacks,
                                     MirroredOptions mo = {}) {
  const auto addresses = test::loopback_addresses(n);
  mo.connect_timeout = std::chrono::seconds(20);
  std::vector<std::future<ReplicaRun>> futures;
  for (int i = 0; i < n; ++i)
    futures.push_back(std::async(std::launch::async, [&, i] {
      ReplicaRun r;
      net::SimpleClusterResolver resolver(net::ClusterSpec({{"worker", addresses}}),
                                          net::TaskId{"worker", i});
      auto strategy = MultiWorkerMirroredStrategy::make(resolver, mo);
      if (!strategy) {
        r.history = strategy.error();
        return r;
      }
      Model model(spec);
      r.history = fit(model, **strategy, {&reg, dataset}, o, callbacks(i));
      r.weights = flat_values(model);
      if (auto e = model.evaluate(); e) r.evaluation = *e;
      return r;
    }));
  std::vector<ReplicaRun> out;
  for (auto& f : futures)
    out.push_back(f.get());
  return out;
}

// Fails fit() on the chief only, at its batch-level point `step` (or never); every replica
// is given one, so that their batch-level points agree.
class ChiefFailsAt : public Callback {
 public:
  ChiefFailsAt(int64_t step, int64_t interval) : step_(step), interval_(interval) {}
  core::Status on_train_batch_end(FitState& s, const Logs&) override {
    if (s.is_chief && s.step == step_)
      return core::make_error(core::Errc::cancelled,
                              "chief killed at step " + std::to_string(s.step));
    return {};
  }
  int64_t batch_interval() const override { return interval_; }

 private:
  int64_t step_, interval_;
};

bool exists(const std::string& path) {
  std::error_code ec;
  return fs::exists(path, ec);
}

}  // namespace

TEST_CASE("mirrored fit keeps the replicas equal and trains as one process on the global batch",
          "[fit][mirrored]") {
  const auto reg = data_registry();
  const auto spec = test::blobs_model("sgd", 0.1f);
  test::TempDir dir;
  FitOptions o;
  o.epochs = 3;  // steps_per_epoch 0: one pass over each shard (8 steps of 2 x 32)
  o.validation = FitOptions::Validation::distributed;
  Model reference(spec);
  FitOptions one_process = o;
  one_process.validation = FitOptions::Validation::direct;
  auto ref = fit(reference, {&reg, "blobs_64"}, one_process);
  REQUIRE(ref.ok());
  REQUIRE(ref->steps == 24);

  std::vector<std::shared_ptr<callbacks::ModelCheckpoint>> checkpoints;
  for (int i = 0; i < 2; ++i)
    checkpoints.push_back(
        std::make_shared<callbacks::ModelCheckpoint>(dir.file("ckpt-" + std::to_string(i))));
  const auto runs = run_replicas(2, spec, reg, "blobs_train", o, [&](int i) {
    return Callbacks{checkpoints[static_cast<size_t>(i)],
                     std::make_shared<callbacks::MetricsLog>(
                         dir.file("metrics-" + std::to_string(i) + ".jsonl"))};
  });
  for (const auto& r : runs) {
    INFO((r.history ? "" : r.history.error().to_string()));
    REQUIRE(r.history.ok());
    CHECK(r.history->steps == 24);
    CHECK(r.history->epochs.size() == 3);
  }
  const auto& chief = *runs[0].history;
  const auto& other = *runs[1].history;
  // One update applied to equal replicas: bit for bit the same weights and logs.
  CHECK(runs[0].weights == runs[1].weights);
  for (size_t e = 0; e < 3; ++e)
    for (const char* k : {"loss", "accuracy", "val_loss", "val_accuracy"})
      CHECK(chief.epochs[e].at(k) == other.epochs[e].at(k));
  // The same steps as one process on the global batch of 64 (the sums differ in order
  // only, so the weights agree to float rounding).
  const auto ref_weights = flat_values(reference);
  REQUIRE(ref_weights.size() == runs[0].weights.size());
  for (size_t i = 0; i < ref_weights.size(); ++i)
    REQUIRE(runs[0].weights[i] == Approx(ref_weights[i]).margin(1e-4));
  for (size_t e = 0; e < 3; ++e) {
    CHECK(chief.epochs[e].at("loss") == Approx(ref->epochs[e].at("loss")).epsilon(1e-4));
    CHECK(chief.epochs[e].at("accuracy") == ref->epochs[e].at("accuracy"));
  }
  CHECK(chief.epochs[2].at("loss") < chief.epochs[0].at("loss"));
  // Distributed validation (each replica half the batches, the sums all-reduced) is the
  // model's whole evaluation.
  CHECK(chief.epochs[2].at("val_accuracy") == test::accuracy(reference, runs[0].evaluation));
  CHECK(chief.epochs[2].at("val_loss") == Approx(runs[0].evaluation.loss()).epsilon(1e-5));
  CHECK(chief.epochs[2].at("val_accuracy") > 0.9);
  // Only the chief writes.
  CHECK(checkpoints[0]->saves() == 3);
  CHECK(exists(dir.file("ckpt-0/final.json")));
  CHECK(checkpoints[1]->saves() == 0);
  CHECK_FALSE(exists(dir.file("ckpt-1")));
  CHECK(exists(dir.file("metrics-0.jsonl")));
  CHECK_FALSE(exists(dir.file("metrics-1.jsonl")));
}

TEST_CASE("mirrored fit: an error on one replica ends fit() on every replica, naming it",
          "[fit][mirrored]") {
  const auto reg = data_registry();
  FitOptions o;
  o.epochs = 2;
  o.steps_per_epoch = 8;
  const auto runs = run_replicas(2, test::blobs_model(), reg, "blobs_train", o, [](int) {
    return Callbacks{std::make_shared<ChiefFailsAt>(4, 2)};
  });
  REQUIRE_FALSE(runs[0].history.ok());
  CHECK(runs[0].history.error().message == "chief killed at step 4");
  REQUIRE_FALSE(runs[1].history.ok());
  CHECK(runs[1].history.error().code == core::Errc::cancelled);
  CHECK_THAT(runs[1].history.error().message, Catch::Contains("worker index [0]"));
  CHECK(runs[0].weights == runs[1].weights);  // both stopped after the same step

  SECTION("replicas given callbacks with different batch-level points are refused") {
    MirroredOptions mo;
    mo.timeout = std::chrono::milliseconds(3000);
    const auto bad = run_replicas(
        2, test::blobs_model(), reg, "blobs_train", o,
        [](int i) { return Callbacks{std::make_shared<ChiefFailsAt>(-1, i == 0 ? 2 : 4)}; }, mo);
    REQUIRE_FALSE(bad[1].history.ok());
    CHECK(bad[1].history.error().code == core::Errc::invalid_argument);
    CHECK_THAT(bad[1].history.error().message,
               Catch::Contains("every 4 steps, the chief's every 2"));
    REQUIRE_FALSE(bad[0].history.ok());  // the chief is left alone in its first step
    CHECK_THAT(bad[0].history.error().message, Catch::Contains("rank 1"));
  }
}

TEST_CASE("mirrored BackupAndRestore resumes the whole job to a run that never stopped",
          "[fit][mirrored][callbacks]") {
  const auto reg = data_registry();
  // Adam: the optimizer's slots and its iteration count (the chief's, broadcast) must
  // come back too.
  const auto spec = test::blobs_model("adam", 0.01f);
  FitOptions o;
  o.epochs = 3;
  o.steps_per_epoch = 8;
  o.validation = FitOptions::Validation::direct;
  const auto reference = run_replicas(2, spec, reg, "blobs_train", o, [](int) {
    return Callbacks{std::make_shared<ChiefFailsAt>(-1, 4)};
  });
  REQUIRE(reference[0].history.ok());

  test::TempDir dir;
  const std::string backup_dir = dir.file("backup");
  auto with_backup = [&](int64_t fail_at) {
    return [&, fail_at](int) {
      return Callbacks{std::make_shared<callbacks::BackupAndRestoreCallback>(
                           backup_dir, callbacks::BackupAndRestoreCallback::Options{4}),
                       std::make_shared<ChiefFailsAt>(fail_at, 4)};
    };
  };
  // The chief fails at step 12 (mid-epoch, just after the backup there): the job ends.
  const auto first = run_replicas(2, spec, reg, "blobs_train", o, with_backup(12));
  REQUIRE_FALSE(first[0].history.ok());
  REQUIRE_FALSE(first[1].history.ok());
  CHECK_FALSE(core::CheckpointManager(backup_dir, 0, "backup").checkpoints().empty());

  // The job again, fresh processes: the chief restores, every replica resumes at step 12.
  const auto second = run_replicas(2, spec, reg, "blobs_train", o, with_backup(-1));
  for (size_t i = 0; i < 2; ++i) {
    const auto& h = second[i].history;
    INFO("replica " << i << (h ? "" : ": " + h.error().to_string()));
    REQUIRE(h.ok());
    CHECK(h->initial_step == 12);
    CHECK(h->initial_epoch == 1);
    CHECK(h->steps == 24);
    CHECK(h->steps_run == 12);
    CHECK(second[i].weights == reference[i].weights);
  }
  CHECK(second[0].history->epochs.back().at("val_loss") ==
        reference[0].history->epochs.back().at("val_loss"));
  // Trained: the chief removed the backup.
  CHECK(core::CheckpointManager(backup_dir, 0, "backup").checkpoints().empty());
}

TEST_CASE(
    "mirrored fit of a Keras model reduces its gradients in buckets during the backward pass, "
    "changing no bit",
    "[fit][mirrored][keras][buckets]") {
  // The blobs as named columns ("x", and "label" as class ids), for a Keras model of
  // x [8] -> Dense 64 relu -> Dense 64 relu -> Dense 4 (seeded initializers: both runs
  // start from the same weights).
  Registry reg;
  reg.add_dataset("blobs_columns", [](const core::InputContext& ctx) {
    auto ds = core::from_vector(test::blobs(512, 1))
                  .shard(ctx.num_input_pipelines, ctx.input_pipeline_id);
    return core::to_batches(ds, 32, /*drop_remainder=*/true).map([](const core::Batch& b) {
      core::Batch out;
      const int64_t n = b.features.shape()[0], d = b.features.shape()[1];
      out.columns.push_back({"x",
                             core::ColumnKind::floats,
                             core::Shape{n, d},
                             std::vector<float>(b.features.data(), b.features.data() + n * d),
                             {},
                             {}});
      out.columns.push_back({"label",
                             core::ColumnKind::ints,
                             core::Shape{n},
                             {},
                             std::vector<int64_t>(b.classes.begin(), b.classes.end()),
                             {}});
      return out;
    });
  });
  auto dense = [](const char* name, int units, const char* activation, int seed) {
    return std::string(R"({"class_name": "Dense", "config": {"name": ")") + name +
           R"(", "units": )" + std::to_string(units) + R"(, "activation": ")" + activation +
           R"(", "kernel_initializer": {"class_name": "GlorotUniform", "config": {"seed": )" +
           std::to_string(seed) + "}}}}";
  };
  test::TempDir dir;
  std::ofstream(dir.file("mlp.json"))
      << R"({"class_name": "Sequential", "config": {"name": "mlp", "layers": [)"
      << R"({"class_name": "InputLayer", "config": {"batch_shape": [null, 8], "name": "x"}}, )"
      << dense("h1", 64, "relu", 1) << ", " << dense("h2", 64, "relu", 2) << ", "
      << dense("out", 4, "linear", 3) << "]}}";
  auto source = read_keras_source(dir.file("mlp.json"));
  REQUIRE(source.ok());
  ModelSpec spec;
  spec.keras = *source;
  spec.keras_options.compile_json =
      R"({"optimizer": {"class_name": "SGD", "config": {"learning_rate": 0.1}},
          "loss": {"class_name": "SparseCategoricalCrossentropy", "config": {"from_logits": true}},
          "metrics": ["accuracy"]})";
  FitOptions o;
  o.epochs = 2;  // 8 steps an epoch: each shard's 256 examples in batches of 32
  auto run = [&](size_t bytes_per_pack) {
    MirroredOptions mo;
    mo.bytes_per_pack = bytes_per_pack;
    return run_replicas(
        2, spec, reg, "blobs_columns", o, [](int) { return Callbacks{}; }, mo);
  };
  // h2's kernel alone is 16 KiB: with 8 KiB packs the output layer's gradients and h2's go
  // to the engine's thread while h1's backward runs; with 1 GiB, all after the pass.
  const auto during = run(8 << 10), after = run(size_t{1} << 30);
  for (const auto* runs : {&during, &after})
    for (const auto& r : *runs) {
      INFO((r.history ? "" : r.history.error().to_string()));
      REQUIRE(r.history.ok());
      CHECK(r.history->steps == 16);
    }
  CHECK(during[0].weights == during[1].weights);
  CHECK(during[0].weights == after[0].weights);
  // A bucket a step, and one in each epoch's last attempt, where the shards have ended: a
  // replica without a batch marks its zeros in the same order.
  CHECK(during[0].history->mirrored.collectives_submitted == 16 + 2);
  CHECK(after[0].history->mirrored.collectives_submitted == 0);
  CHECK(during[0].history->epochs[1].at("loss") < during[0].history->epochs[0].at("loss"));
}

TEST_CASE(
    "mirrored fit of a Keras model reduces its gradients in buckets as its backward pass "
    "makes them, and trains as with one bucket a step",
    "[fit][mirrored][graph]") {
  const auto reg = data_registry();
  FitOptions o;
  o.epochs = 2;  // 8 steps an epoch: each shard's 256 examples in batches of 32
  auto run = [&](size_t bytes_per_pack) {
    MirroredOptions mo;
    mo.bytes_per_pack = bytes_per_pack;
    return run_replicas(
        2, test::blobs_model(), reg, "blobs_train", o, [](int) { return Callbacks{}; }, mo);
  };
  // The output layer's kernel is 256 bytes, the hidden one's 512: with 256-byte packs the
  // later layers' gradients go to the engine's thread while the first layer's are computed.
  const auto buckets = run(256);
  const auto whole = run(size_t{1} << 30);
  for (const auto* runs : {&buckets, &whole})
    for (const auto& r : *runs) {
      INFO((r.history ? "" : r.history.error().to_string()));
      REQUIRE(r.history.ok());
      CHECK(r.history->steps == 16);
    }
  CHECK(buckets[0].weights == buckets[1].weights);
  CHECK(buckets[0].weights == whole[0].weights);
  // Each step more than one bucket, and the epochs' last attempts too (a replica whose
  // shard ended marks its zeros in the graph's gradient order).
  CHECK(buckets[0].history->mirrored.collectives_submitted > 16 + 2);
  CHECK(buckets[0].history->mirrored.collectives_submitted >
        whole[0].history->mirrored.collectives_submitted);
  CHECK(buckets[0].history->epochs[1].at("loss") < buckets[0].history->epochs[0].at("loss"));
}
