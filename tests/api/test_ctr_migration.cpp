// The one-way migration of checkpoints that ctr_fit wrote before its model was a Keras graph
// (tests/api/data/README.md says how they were made): a Model of the built-in CTR form takes
// them, scoring what the programs' own layout scores (core::keras::CtrGraph over the old
// variables, as ctr_fit's replicas computed).
#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>

#include "cluster_fixture.hpp"
#include "core/checkpoint/checkpoint.hpp"
#include "core/checkpoint/checkpoint_manager.hpp"
#include "core/ctr_batch.hpp"
#include "core/keras/builtin_models.hpp"
#include "core/keras/ctr_graph.hpp"
#include "core/partitioner.hpp"
#include "helpers.hpp"
#include "job/job_registry.hpp"
#include "troupe/troupe.hpp"

namespace troupe {
namespace {

// The model the checkpoints hold: ctr_fit's DeepFM at --dim 2 --hidden 3 over 4 buckets a
// field.
core::CtrModelConfig v1_config() {
  core::CtrModelConfig c;
  c.dim = 2;
  c.hidden = {3};
  return c;
}
constexpr int64_t kRows = 26 * 4;

core::Checkpoint read_v1(const std::string& name) {
  auto c = core::read_checkpoint(std::string(TROUPE_SOURCE_DIR) + "/tests/api/data/" + name);
  REQUIRE(c.ok());
  return std::move(*c);
}

ModelSpec keras_ctr(const core::CtrModelConfig& c, bool dynamic) {
  ModelSpec m;
  m.keras =
      keras_source("ctr.json", core::keras::ctr_model_config(c, kRows, "adagrad", 0.2f).dump());
  if (dynamic) m.keras_options.dynamic_tables["embedding"] = DynamicTableSpec{};
  return m;
}

// The old layout's logits: the dense variables by their names, each id's row of the table
// (a key without a row: zeros, as the PS tasks and ctr_fit's chief scored it).
core::Tensor old_logits(const core::Checkpoint& ckpt, const core::Batch& batch, bool keyed) {
  const auto c = v1_config();
  core::keras::CtrGraph g(c, kRows, keyed);
  std::vector<core::Tensor> dense;
  for (const auto& name : g.names())
    dense.push_back(ckpt.tensors.at(name));
  REQUIRE(g.assign(std::move(dense)).ok());
  REQUIRE(g.feed(batch).ok());
  const core::Tensor& table = ckpt.tensors.at("embedding");
  const int64_t W = c.row_width();
  core::Tensor rows(core::Shape{static_cast<int64_t>(g.ids().size()), W}, 0.0f);
  for (size_t i = 0; i < g.ids().size(); ++i) {
    int64_t row = g.ids()[i];
    if (keyed) {
      const auto& keys = ckpt.ints.at("embedding/keys");
      const auto at = std::find(keys.begin(), keys.end(), row);
      row = at == keys.end() ? -1 : at - keys.begin();
    }
    if (row >= 0) std::copy_n(table.data() + row * W, W, rows.data() + static_cast<int64_t>(i) * W);
  }
  REQUIRE(g.give_rows(rows).ok());
  auto logits = g.forward(/*training=*/false);
  REQUIRE(logits.ok());
  return core::Tensor::from_view(*logits).to(core::Device::cpu());
}

core::Tensor new_logits(Model& model, const core::Batch& batch) {
  core::Batch columns;
  REQUIRE(core::keras::ctr_columns(v1_config(), batch, false, false, columns).ok());
  auto out = model.predict(columns);
  REQUIRE(out.ok());
  REQUIRE(out->size() == 1);
  return (*out)[0];
}

void check_same(const core::Tensor& got, const core::Tensor& want) {
  REQUIRE(got.size() == want.size());
  for (int64_t i = 0; i < got.size(); ++i)
    CHECK(got[i] == Approx(want[i]).margin(1e-5));
}

}  // namespace

TEST_CASE("A ctr_fit checkpoint of the programs' variables restores into the Keras form",
          "[ctr][checkpoint][migration]") {
  const core::Checkpoint old = read_v1("ctr_fit_v1.tckpt");
  REQUIRE(core::keras::is_ctr_program_checkpoint(old));
  Model model(keras_ctr(v1_config(), /*dynamic=*/false));
  REQUIRE(model.status().ok());
  REQUIRE(model.set_weights(old).ok());
  // The weights are the old values under the form's names: the table unchanged, the
  // dense term's bias and kernel moved, the step and epoch kept.
  const core::Checkpoint now = model.weights();
  CHECK(now.tensors.count("bias") == 0);
  const core::Tensor& table = now.tensors.at("embedding/embeddings");
  REQUIRE(table.shape() == old.tensors.at("embedding").shape());
  for (int64_t i = 0; i < table.size(); ++i)
    CHECK(table[i] == old.tensors.at("embedding")[i]);
  CHECK(now.tensors.at("dense_linear/bias")[0] == old.tensors.at("bias")[0]);
  CHECK(now.tensors.at("dnn_out/kernel").size() == old.tensors.at("dnn/dense_1/kernel").size());

  core::Batch batch = test::make_ctr_batch(16, 26, 13, 3);
  std::fill(batch.values.begin(), batch.values.end(), 1.0f);
  check_same(new_logits(model, batch), old_logits(old, batch, /*keyed=*/false));

  // A model of another shape, or of no CTR form, refuses it naming why; nothing changes.
  core::CtrModelConfig wider = v1_config();
  wider.dim = 3;
  Model other(keras_ctr(wider, false));
  auto refused = other.set_weights(old);
  REQUIRE_FALSE(refused.ok());
  CHECK_THAT(refused.error().message, Catch::Contains("table"));
  Model blobs(test::blobs_model());
  refused = blobs.set_weights(old);
  REQUIRE_FALSE(refused.ok());
  CHECK_THAT(refused.error().message, Catch::Contains("built-in CTR model"));
  // A damaged one (its MLP's last kernel missing) is refused whole.
  core::Checkpoint damaged = old;
  damaged.tensors.erase("dnn/dense_1/kernel");
  Model fresh(keras_ctr(v1_config(), false));
  const auto before = fresh.weights();
  refused = fresh.set_weights(damaged);
  REQUIRE_FALSE(refused.ok());
  CHECK_THAT(refused.error().message, Catch::Contains("dnn/dense_1/kernel"));
  const auto after = fresh.weights();
  for (const auto& [name, t] : before.tensors)
    for (int64_t i = 0; i < t.size(); ++i)
      REQUIRE(after.tensors.at(name)[i] == t[i]);
}

TEST_CASE("A ctr_fit checkpoint of a dynamic table restores with its keys",
          "[ctr][checkpoint][migration][dynamic]") {
  const core::Checkpoint old = read_v1("ctr_fit_v1_dynamic.tckpt");
  REQUIRE(core::keras::is_ctr_program_checkpoint(old));
  const auto& keys = old.ints.at("embedding/keys");
  REQUIRE(keys.size() > 26);
  Model model(keras_ctr(v1_config(), /*dynamic=*/true));
  REQUIRE(model.set_weights(old).ok());
  const core::Checkpoint now = model.weights();
  CHECK(now.ints.at("embedding/embeddings/keys") == keys);
  CHECK(now.tensors.at("embedding/embeddings").shape() == old.tensors.at("embedding").shape());
  // Examples of the table's keys, and a key it never admitted (scored with zeros).
  core::Batch batch = test::make_ctr_batch(8, 26, 13, 5);
  std::fill(batch.values.begin(), batch.values.end(), 1.0f);
  for (size_t i = 0; i < batch.ids.size(); ++i)
    batch.ids[i] = keys[(i * 7) % keys.size()];
  batch.ids[3] = 0x5eed5eed5eedLL;
  REQUIRE(std::find(keys.begin(), keys.end(), batch.ids[3]) == keys.end());
  check_same(new_logits(model, batch), old_logits(old, batch, /*keyed=*/true));
}

TEST_CASE("A PS backup of a ModelSpec::ctr job restores into the Keras form",
          "[process][ctr][backup][migration]") {
  // ctr_fit_v1_backup/: a BackupAndRestoreCallback's backup of the PS tasks (one, each
  // variable one shard) after ctr_fit's first epoch, its variables by the programs' names.
  test::TempDir dir;
  std::filesystem::copy(std::string(TROUPE_SOURCE_DIR) + "/tests/api/data/ctr_fit_v1_backup",
                        dir.file("backup"));
  core::CheckpointManager manager(dir.file("backup"), 2, "backup");
  auto saved = manager.restore_latest();
  REQUIRE(saved.ok());
  const core::Checkpoint& old = saved->second;
  REQUIRE(old.tensors.count("value:embedding#0") == 1);

  test::LocalCluster cluster(1, 1);  // children: ps:0, worker:0
  auto strategy = ParameterServerStrategy::make(cluster.chief(),
                                                std::make_shared<core::FixedShardsPartitioner>(1));
  REQUIRE(strategy.ok());
  Model model(keras_ctr(v1_config(), /*dynamic=*/false));
  REQUIRE(model.attach(**strategy).ok());
  {  // Without the former names the backup is refused, naming the variable it lacks.
    auto plain = BackupAndRestore::make(**strategy, dir.file("backup"));
    REQUIRE(plain.ok());
    auto refused = (*plain)->restore();
    REQUIRE_FALSE(refused.ok());
    CHECK_THAT(refused.error().message, Catch::Contains("no value of"));
  }
  BackupAndRestore::Options options;
  options.former_names = core::keras::ctr_former_names(v1_config());
  auto backup = BackupAndRestore::make(**strategy, dir.file("backup"), options);
  REQUIRE(backup.ok());
  auto at = (*backup)->restore();
  INFO((at ? std::string() : at.error().message));
  REQUIRE(at.ok());
  REQUIRE(at->has_value());
  CHECK((*at)->epoch == old.ints.at("epoch")[0]);
  CHECK((*at)->step == old.ints.at("step")[0]);
  // Every variable on the PS tasks holds its old value: the table, and the dense ones
  // under their graph paths.
  auto now = model.read_weights();
  REQUIRE(now.ok());
  for (const auto& [path, former] : options.former_names) {
    INFO(path << " <- " << former);
    const core::Tensor& want = old.tensors.at("value:" + former + "#0");
    const core::Tensor& got = now->tensors.at(path);
    REQUIRE(got.shape() == want.shape());
    for (int64_t i = 0; i < got.size(); ++i)
      REQUIRE(got[i] == want[i]);
  }
  CHECK(now->tensors.size() == options.former_names.size());  // nothing left unrestored
}

}  // namespace troupe
