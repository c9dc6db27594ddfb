// What a parameter-server job's chief sends its workers for a Keras model: the model file
// without its embedding tables (troupe::worker_keras_source), which a worker builds its
// replica from as it would from the whole file, holding no table.
#include <catch2/catch.hpp>

#include <fstream>
#include <limits>
#include <sstream>

#include "api/graph_replica.hpp"
#include "api/model_state.hpp"
#include "core/keras/builtin_models.hpp"
#include "helpers.hpp"
#include "troupe/keras.hpp"
#include "troupe/model.hpp"

using namespace troupe;
namespace tc = troupe::core;

namespace {

// A DeepFM .keras file (the built-in model's Keras form) of a table of `rows` rows.
std::string deepfm_file(const std::string& path, int64_t rows) {
  tc::CtrExport m;
  m.config.model.kind = tc::CtrKind::deepfm;
  m.config.model.fields = 4;
  m.config.model.dense = 3;
  m.config.model.dim = 8;
  m.config.model.hidden = {16};
  m.config.buckets_per_field = rows / 4;
  m.config.optimizer = "adagrad";
  m.config.learning_rate = 0.05f;
  uint64_t seed = 3;
  for (const auto& [name, shape] : tc::ctr_dense_variables(m.config.model))
    m.dense.emplace(name, test::random_tensor(shape, seed++, -0.5f, 0.5f));
  m.rows = test::random_tensor(tc::Shape{rows, m.config.model.row_width()}, 9, -0.05f, 0.05f);
  REQUIRE(tc::keras::write_ctr_keras(path, m).ok());
  return path;
}

}  // namespace

TEST_CASE("A PS job's workers get the Keras model without its tables, and build it", "[keras]") {
  test::TempDir dir;
  const int64_t rows = 4 * 20000;  // 80000 x 9 floats: a 2.9 MB table
  auto source = read_keras_source(deepfm_file(dir.file("deepfm.keras"), rows));
  REQUIRE(source.ok());
  ModelSpec spec;
  spec.keras = *source;
  Model chief(spec);
  auto sent = worker_keras_source(chief);
  REQUIRE(sent.ok());
  // The same model by name and hash, a fraction of the bytes: the dense weights only.
  CHECK((*sent)->name == (*source)->name);
  CHECK((*sent)->sha256 == (*source)->sha256);
  INFO("file " << (*source)->bytes.size() << " bytes, sent " << (*sent)->bytes.size());
  CHECK((*source)->bytes.size() > rows * 9 * 4);
  CHECK((*sent)->bytes.size() < 64 * 1024);

  // A worker's replica from it: every dense weight the file's, no table held.
  KerasJob job;
  job.source = *sent;
  auto decoded = decode_keras_job(encode_keras_job(job));
  REQUIRE(decoded.ok());
  auto worker = detail::GraphReplica::make(*decoded->source, KerasOptions{}, /*worker_copy=*/true);
  INFO((worker ? std::string() : worker.error().message));
  REQUIRE(worker.ok());
  auto& full = chief.state().replica.graph->graph();
  auto& g = (*worker)->graph();
  REQUIRE(g.weights().size() == full.weights().size());
  int tables = 0;
  for (size_t w = 0; w < g.weights().size(); ++w) {
    const auto& got = g.weights()[w].weight();
    INFO(g.weights()[w].path);
    if (got.table) {
      ++tables;
      CHECK_FALSE(got.value.shape() == got.shape);  // never allocated
      continue;
    }
    const tc::Tensor want = full.weights()[w].weight().value.to(tc::Device::cpu());
    REQUIRE(got.value.shape() == want.shape());
    for (int64_t i = 0; i < want.size(); ++i)
      REQUIRE(got.value[i] == want[i]);
  }
  CHECK(tables == 1);  // the built-in form's one table, rows [1 + dim]

  // Only a worker installing the chief's copy takes it: as a model file it is refused.
  auto as_file = detail::GraphReplica::make(*decoded->source, KerasOptions{});
  REQUIRE_FALSE(as_file.ok());
  CHECK(as_file.error().message.find("without its embedding tables") != std::string::npos);

  // Only such a file may lack its tables: the same bytes without the mark are refused,
  // naming the missing dataset.
  auto file = tc::keras::read_keras_bytes((*sent)->bytes, "sent.keras");
  REQUIRE(file.ok());
  file->metadata.erase(tc::keras::tables_elsewhere_key);
  auto unmarked = tc::keras::write_keras_bytes(*file, "unmarked.keras");
  REQUIRE(unmarked.ok());
  auto refused = tc::keras::load_model_bytes(*unmarked, "unmarked.keras", /*worker_copy=*/true);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().message.find("model.weights.h5 has no") != std::string::npos);
}

TEST_CASE(
    "A worker's replica in mixed_float16 scales its loss, unscales the gradients, and "
    "skips a step that overflowed",
    "[keras][precision]") {
  tc::keras::ClassifierForm form;
  form.widths = {8, 16, 4};
  form.features = true;
  const auto source =
      keras_source("mlp.json", tc::keras::classifier_model_config(form, "sgd", 0.1f)->dump());
  auto made = detail::GraphReplica::make(*source, KerasOptions{});
  REQUIRE(made.ok());
  detail::GraphReplica& r = **made;
  REQUIRE(r.place("cpu", "float32").ok());
  CHECK_FALSE(r.loss_scale.has_value());
  CHECK(r.finish_scaled_step());  // nothing to do without a loss scale

  // A batch of features [4, 8] and class ids.
  tc::Batch b;
  const std::vector<tc::FeatureSpec> specs = {{"features", tc::ColumnKind::floats, {8}},
                                              {"label", tc::ColumnKind::ints, {}}};
  b.columns = tc::make_columns(specs, 4);
  for (int i = 0; i < 32; ++i)
    b.columns[0].floats.push_back(0.1f * static_cast<float>(i % 9) - 0.3f);
  b.columns[1].ints = {0, 1, 2, 3};
  tc::finish_columns(b.columns, specs, 4);
  auto gradients = [&] {
    std::vector<tc::Tensor> out;
    for (size_t w : r.dense)
      out.push_back(r.graph().gradient(w).to(tc::Device::cpu()));
    return out;
  };

  REQUIRE(r.place("cpu", "mixed_float16").ok());
  REQUIRE(r.loss_scale.has_value());
  const float scale = r.loss_scale->scale();
  REQUIRE(scale > 1.0f);
  REQUIRE(r.run(b, /*train=*/true, detail::held_tables(r), 1.0f).ok());
  const auto plain = gradients();
  REQUIRE(r.run(b, /*train=*/true, detail::held_tables(r), scale).ok());
  REQUIRE(r.finish_scaled_step());
  const auto unscaled = gradients();
  for (size_t i = 0; i < plain.size(); ++i)
    for (int64_t k = 0; k < plain[i].size(); ++k)
      CHECK(unscaled[i][k] == Approx(plain[i][k]).margin(1e-4).epsilon(1e-2));
  // An overflow: the step is skipped and the scale lowered.
  REQUIRE(r.run(b, /*train=*/true, detail::held_tables(r), scale).ok());
  r.graph().gradient(r.dense.front()).fill(std::numeric_limits<float>::infinity());
  CHECK_FALSE(r.finish_scaled_step());
  CHECK(r.loss_scale->scale() < scale);
}
