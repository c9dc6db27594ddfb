#pragma once

// The steps of the test job: the same registry in the worker processes (test_job) and in
// the test acting as chief.

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "core/keras/builtin_models.hpp"
#include "helpers.hpp"
#include "troupe/troupe.hpp"

namespace troupe::test {

/// A small classification problem: 4 classes of 8 features, each a Gaussian blob around
/// its own centre (seeded, so the same in every process of a run).
inline std::vector<core::Example> blobs(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(7);  // the centres are the same for every seed
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<std::vector<float>> centres(4, std::vector<float>(8));
  for (auto& c : centres)
    for (auto& x : c)
      x = 2.5f * normal(rng);
  rng.seed(seed);
  std::vector<core::Example> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    auto& e = out[static_cast<size_t>(i)];
    const auto k = static_cast<size_t>(i % 4);
    for (float c : centres[k])
      e.features.push_back(c + normal(rng));
    e.label = static_cast<float>(k);
  }
  return out;
}

/// Examples of blobs() as a batch of named columns, as a Keras model reads them:
/// `features` [n, 8] (floats) and `label` [n] (class ids).
inline core::Batch blobs_columns(const std::vector<core::Example>& examples) {
  return core::collate_classes(examples);
}

/// The blobs classifier: a Keras model (the JSON of Keras's form of the MLP 8-16-4, sparse
/// categorical cross-entropy from logits, accuracy, `optimizer` at `lr`), named "blobs": its
/// steps are register_model's, its data the datasets "blobs_train" / "blobs_repeat" (named
/// columns), its validation data blobs(256, 99) in batches of 64.
inline ModelSpec blobs_model(const std::string& optimizer = "sgd", float lr = 0.1f) {
  core::keras::ClassifierForm form;
  form.widths = {8, 16, 4};
  form.seed = 3;
  form.features = true;
  ModelSpec m;
  m.name = "blobs";
  m.keras = keras_source("blobs.json",
                         core::keras::classifier_model_config(form, optimizer, lr).value().dump());
  m.eval_batches = []() -> core::Expected<std::vector<core::Batch>> {
    const auto examples = blobs(256, 99);
    std::vector<core::Batch> out;
    for (size_t i = 0; i < examples.size(); i += 64)
      out.push_back(blobs_columns({examples.begin() + static_cast<std::ptrdiff_t>(i),
                                   examples.begin() + static_cast<std::ptrdiff_t>(i + 64)}));
    return out;
  };
  return m;
}

/// The compiled accuracy of `stats` (a Keras model's metric, by its History name).
inline double accuracy(const Model& model, const BatchStats& stats) {
  return model.logs(stats).at("accuracy");
}

/// Clicks from a hidden teacher over 4 fields of 16 categories each (id f * 16 + c, so the
/// table has 64 rows): logit = sum of a per-category weight plus a product of two fields'
/// factors, the click drawn from its sigmoid. Seeded: the same in every process.
inline std::vector<core::Example> clicks(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(11);  // the teacher is the same for every seed
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> w(64), v(64);
  for (auto& x : w)
    x = 1.2f * normal(rng);
  for (auto& x : v)
    x = normal(rng);
  rng.seed(seed);
  std::uniform_real_distribution<float> u01(0.0f, 1.0f);
  std::vector<core::Example> out(static_cast<size_t>(n));
  for (auto& e : out) {
    float logit = -0.5f;
    for (int64_t f = 0; f < 4; ++f) {
      const int64_t id = f * 16 + static_cast<int64_t>(rng() % 16);
      e.ids.push_back(id);
      logit += w[static_cast<size_t>(id)];
    }
    logit += v[static_cast<size_t>(e.ids[0])] * v[static_cast<size_t>(e.ids[1])];
    e.label = u01(rng) < 1.0f / (1.0f + std::exp(-logit)) ? 1.0f : 0.0f;
  }
  return out;
}

/// The DeepFM clicks() trains: 4 fields, no dense features, dim 4, one hidden layer of 8.
inline core::CtrModelConfig clicks_config() {
  core::CtrModelConfig c;
  c.kind = core::CtrKind::deepfm;
  c.fields = 4;
  c.dense = 0;
  c.dim = 4;
  c.hidden = {8};
  c.seed = 5;
  return c;
}

/// Examples of clicks() as the Keras form's columns: `ids` [n, 4], `label` [n, 1].
inline core::Batch clicks_columns(const std::vector<core::Example>& examples) {
  core::Batch out;
  const auto st = core::keras::ctr_columns(clicks_config(), core::collate(examples),
                                           /*weighted=*/false, /*labels=*/true, out);
  TROUPE_ASSERT(st.ok(), "clicks() as columns");
  return out;
}

/// `examples` as clicks_columns batches of `size` (the last smaller).
inline std::vector<core::Batch> clicks_batches(const std::vector<core::Example>& examples,
                                               size_t size) {
  std::vector<core::Batch> out;
  for (size_t i = 0; i < examples.size(); i += size)
    out.push_back(clicks_columns(
        {examples.begin() + static_cast<std::ptrdiff_t>(i),
         examples.begin() + static_cast<std::ptrdiff_t>(std::min(examples.size(), i + size))}));
  return out;
}

/// A DeepFM over clicks(), named "ctr": the built-in CTR model's Keras form
/// (core::keras::ctr_model_config) over a table of 64 rows, Adagrad at 0.1; validation on
/// 1024 held-out clicks in batches of 256.
inline ModelSpec ctr_model() {
  ModelSpec m;
  m.name = "ctr";
  m.keras = keras_source(
      "ctr.json", core::keras::ctr_model_config(clicks_config(), 64, "adagrad", 0.1f).dump());
  m.eval_batches = []() -> core::Expected<std::vector<core::Batch>> {
    return clicks_batches(clicks(1024, 99), 256);
  };
  return m;
}

/// clicks() with every id as a raw 64-bit key (scattered over the whole range, negative
/// ones too), as a table without a fixed vocabulary sees them.
inline std::vector<core::Example> keyed_clicks(int64_t n, uint64_t seed) {
  auto out = clicks(n, seed);
  for (auto& e : out)
    for (auto& id : e.ids)
      id = static_cast<int64_t>((static_cast<uint64_t>(id) + 1) * 0x9e3779b97f4a7c15ull);
  return out;
}

/// ctr_model() over keyed_clicks(), named "ctr_keyed", its table a dynamic one on the PS
/// tasks (a row per key once seen twice).
inline ModelSpec ctr_keyed_model() {
  ModelSpec m = ctr_model();
  m.name = "ctr_keyed";
  DynamicTableSpec table;
  table.min_count = 2;
  m.keras_options.dynamic_tables["embedding"] = table;
  m.eval_batches = []() -> core::Expected<std::vector<core::Batch>> {
    return clicks_batches(keyed_clicks(1024, 99), 256);
  };
  return m;
}

/// "clicks_repeat": 2048 clicks (each worker its shard), repeated, in batches of 64;
/// "keyed_clicks_repeat": the same clicks with raw keys for ids.
inline void add_clicks_dataset(Registry& r) {
  auto make = [](const core::InputContext& ctx, bool keyed) {
    auto ds = core::from_vector(keyed ? keyed_clicks(2048, 1) : clicks(2048, 1))
                  .shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
                  .repeat();
    return ds.batch(64, /*drop_remainder=*/true).map(clicks_columns);
  };
  r.add_dataset("clicks_repeat",
                [make](const core::InputContext& ctx) { return make(ctx, false); });
  r.add_dataset("keyed_clicks_repeat",
                [make](const core::InputContext& ctx) { return make(ctx, true); });
}

/// "blobs_train": 512 examples in batches of 32 (named columns: blobs_columns), in order
/// (16 batches a pass; each worker takes its shard); "blobs_repeat": the same, repeated
/// forever.
inline void add_blobs_datasets(Registry& r) {
  auto make = [](const core::InputContext& ctx, bool repeat) {
    auto ds =
        core::from_vector(blobs(512, 1)).shard(ctx.num_input_pipelines, ctx.input_pipeline_id);
    if (repeat) ds = ds.repeat();
    return ds.batch(32, /*drop_remainder=*/true).map(blobs_columns);
  };
  r.add_dataset("blobs_train", [make](const core::InputContext& ctx) { return make(ctx, false); });
  r.add_dataset("blobs_repeat", [make](const core::InputContext& ctx) { return make(ctx, true); });
}

inline Registry make_test_registry() {
  Registry r;
  add_blobs_datasets(r);
  register_model(r, blobs_model());
  add_clicks_dataset(r);
  register_model(r, ctr_model());
  register_model(r, ctr_keyed_model());
  r.add_step("add", [](StepContext&, int a, int b) { return a + b; });
  r.add_step("whoami", [](StepContext& ctx) { return ctx.worker_index(); });
  // Pulls `var`, pushes a gradient of ones, returns the sum of what it pulled.
  r.add_step("ones_step", [](StepContext& ctx, std::string var) -> core::Expected<double> {
    auto v = ctx.pull({var});
    if (!v) return v.error();
    core::Tensor g((*v)[0].shape(), 1.0f);
    if (auto st = ctx.push({{var, g}}); !st) return st.error();
    return static_cast<double>((*v)[0].view().flat().sum());
  });
  // Pulls rows of `var` (full-variable indices), pushes a gradient of ones for each, and
  // returns the sum of what it pulled.
  r.add_step(
      "rows_step",
      [](StepContext& ctx, std::string var, std::vector<int64_t> rows) -> core::Expected<double> {
        auto got = ctx.pull_rows(var, rows);
        if (!got) return got.error();
        core::Tensor g(got->shape(), 1.0f);
        if (auto st = ctx.push_rows(var, rows, g); !st) return st.error();
        return static_cast<double>(got->view().flat().sum());
      });
  // Rows of two variables pulled in one call (one request per PS task), then a gradient of
  // ones for `a`'s rows and of twos for `b`'s pushed in one call; returns what it pulled
  // of each, summed.
  r.add_step(
      "two_rows_step",
      [](StepContext& ctx, std::string a, std::vector<int64_t> rows_a, std::string b,
         std::vector<int64_t> rows_b) -> core::Expected<std::vector<double>> {
        auto got =
            ctx.pull_rows(std::vector<StepContext::RowsOf>{{a, &rows_a, {}}, {b, &rows_b, {}}});
        if (!got) return got.error();
        if (got->size() != 2)
          return core::make_error(core::Errc::internal,
                                  std::to_string(got->size()) + " tensors for 2 variables");
        const core::Tensor ga((*got)[0].shape(), 1.0f), gb((*got)[1].shape(), 2.0f);
        if (auto st =
                ctx.push_rows(std::vector<StepContext::RowsOf>{{a, &rows_a, ga}, {b, &rows_b, gb}});
            !st)
          return st.error();
        return std::vector<double>{(*got)[0].view().flat().sum(), (*got)[1].view().flat().sum()};
      });
  // A stuck step, for the watchdog: waits (at most 10 s) until the file `release` exists in
  // directory `dir`; returns whether it did.
  r.add_step("held", [](StepContext&, std::string dir, std::string release) {
    return test::wait_for_file_in(
        dir, [&] { return std::filesystem::exists(dir + "/" + release); },
        std::chrono::seconds(10));
  });
  // Pulls `var`, checks the gradient `scale` * ones for NaN/Inf before pushing it (as
  // TensorFlow's check_numerics would), returns the sum it pulled.
  r.add_step(
      "checked_step", [](StepContext& ctx, std::string var, float scale) -> core::Expected<double> {
        auto v = ctx.pull({var});
        if (!v) return v.error();
        core::Tensor g((*v)[0].shape(), scale);
        for (int64_t i = 0; i < g.size(); ++i)
          if (!std::isfinite(g[i]))
            return core::make_error(core::Errc::invalid_argument,
                                    "check_numerics: gradient of '" + var + "' is not finite");
        if (auto st = ctx.push({{var, g}}); !st) return st.error();
        return static_cast<double>((*v)[0].view().flat().sum());
      });
  r.add_step("fail", [](StepContext&, int) -> core::Expected<int> {
    return core::make_error(core::Errc::invalid_argument, "injected failure");
  });
  // Marks its start with the file `name` in `dir` (its content: this worker's index), then
  // waits (at most 10 s) for `dir`/release; returns the worker's index.
  r.add_step("marked_hold", [](StepContext& ctx, std::string dir, std::string name) {
    std::ofstream(dir + "/" + name + ".tmp") << ctx.worker_index();
    std::filesystem::rename(dir + "/" + name + ".tmp", dir + "/" + name);
    test::wait_for_file_in(
        dir, [&] { return std::filesystem::exists(dir + "/release"); }, std::chrono::seconds(10));
    return ctx.worker_index();
  });
  // A long step: marks its start, then pulls `var` over and over for at most 30 s. Returns
  // the pull's error once it fails (cancelled), or the number of pulls.
  r.add_step("pull_loop",
             [](StepContext& ctx, std::string var, std::string dir,
                std::string name) -> core::Expected<int> {
               std::ofstream(dir + "/" + name);
               const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
               int pulls = 0;
               for (; std::chrono::steady_clock::now() < end; ++pulls)
                 if (auto v = ctx.pull({var}); !v) return v.error();
               return pulls;
             });
  // Waits (at most 10 s) for `dir`/release, then fails.
  r.add_step("fail_when_released", [](StepContext&, std::string dir) -> core::Expected<int> {
    test::wait_for_file_in(
        dir, [&] { return std::filesystem::exists(dir + "/release"); }, std::chrono::seconds(10));
    return core::make_error(core::Errc::invalid_argument, "released failure");
  });
  // Creates `dir`/`name`: evidence that the closure ran.
  r.add_step("touch", [](StepContext&, std::string dir, std::string name) {
    std::ofstream(dir + "/" + name);
    return true;
  });
  // Takes value() of an error, as a careless step would.
  r.add_step("value_of_error", [](StepContext&) -> int {
    core::Expected<int> missing = core::make_error(core::Errc::not_found, "no such thing");
    return missing.value();
  });
  // Runs for `ms` milliseconds (work the step does, not a wait for a condition).
  r.add_step("busy_ms", [](StepContext& ctx, int ms) {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    return ctx.worker_index();
  });
  // Takes its worker's process down, as a step with a fatal bug would.
  r.add_step("crash", [](StepContext&) -> int { std::abort(); });
  // Sum of the labels of this worker's next batch; -1 at the end of its shard.
  auto next_sum = [](StepContext& ctx, PerWorkerDataset ds) -> core::Expected<double> {
    auto b = ctx.next_batch(ds);
    if (!b) return b.error();
    if (!*b) return -1.0;
    double s = 0;
    for (float l : (*b)->labels)
      s += l;
    return s;
  };
  r.add_step("batch_sum", next_sum);
  // As batch_sum, plus 1000 times the worker's index.
  r.add_step("who_batch",
             [next_sum](StepContext& ctx, PerWorkerDataset ds) -> core::Expected<double> {
               auto s = next_sum(ctx, std::move(ds));
               if (!s) return s.error();
               return 1000.0 * ctx.worker_index() + *s;
             });
  // A dataset function that takes as long as the test wants (as one reading a large file):
  // it returns once the file `release` exists in the directory TROUPE_TEST_HOLD_DIR names
  // (at most 10 s).
  r.add_dataset("held_ints", [](const core::InputContext& ctx) {
    if (const char* dir = std::getenv("TROUPE_TEST_HOLD_DIR"))
      test::wait_for_file_in(
          dir, [&] { return std::filesystem::exists(std::string(dir) + "/release"); },
          std::chrono::seconds(10));
    std::vector<core::Example> ex(4);
    return core::to_batches(
        core::from_vector(std::move(ex)).shard(ctx.num_input_pipelines, ctx.input_pipeline_id), 2,
        false);
  });
  r.add_dataset("ints", [](const core::InputContext& ctx) {
    std::vector<core::Example> ex(20);
    for (int i = 0; i < 20; ++i)
      ex[static_cast<size_t>(i)].label = static_cast<float>(i);
    return core::to_batches(
        core::from_vector(std::move(ex)).shard(ctx.num_input_pipelines, ctx.input_pipeline_id), 5,
        false);
  });
  return r;
}

}  // namespace troupe::test
