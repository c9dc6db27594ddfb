// Click-through-rate training with fit(): DeepFM as a troupe::Model (its Keras form, the
// graph core::keras::ctr_model_config writes) whose table is split over the PS tasks,
// ModelCheckpoint every epoch, and a side-car evaluator that scores each checkpoint on the
// held-out file and reports its AUC. The same binary runs every task:
//
//   build/bin/ctr_datagen --out /tmp/ctr --rows 400000 --files 4 --vocab 50
//   build/bin/troupe launch --ps 2 --workers 2 --evaluator -- build/bin/ctr_fit --data /tmp/ctr
//
// The chief prints one JSON line (examples/s, auc, val_auc, teacher_auc); the evaluator one
// per checkpoint ({"step", "auc", ...}) and a summary.
#include <chrono>
#include <iostream>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "core/data/sparse_input.hpp"
#include "core/json_text.hpp"
#include "core/keras/builtin_models.hpp"
#include "ctr_data.hpp"
#include "device_flags.hpp"
#include "examples/command_line.hpp"
#include "net/slurm.hpp"
#include "serve_task.hpp"
#include "table_flags.hpp"
#include "troupe/troupe.hpp"

namespace tc = troupe::core;
using clock_type = std::chrono::steady_clock;

namespace {

struct Settings {
  std::string data;
  std::string format = "criteo";
  std::string model_dir;
  int dim = 8;
  std::vector<int64_t> hidden = {64, 64};
  int64_t buckets = 4096;
  int batch = 512;
  int epochs = 4;
  int64_t steps_per_epoch = 800;
  int steps_per_execution = 1;
  std::string optimizer = "adagrad";
  float lr = 0.2f;
  int64_t evaluator_timeout_s = 600;
  std::string export_path;  // a `troupe export` model of the trained model, written at the end
  int32_t export_min_count = 0;
  troupe::examples::DeviceFlags device;  // where each process's replica computes
  troupe::examples::WireFlag wire;       // PS tasks: the tensor channel's type
  troupe::examples::TableFlags table;    // --table fixed|dynamic and the dynamic table's flags

  std::string ext() const { return format == "tfrecord" ? ".tfrecord" : ".txt"; }
  tc::DataFormat record_format() const { return tc::parse_sparse_format(format).value(); }
};

// The model: DeepFM as its Keras form (core::keras::ctr_model_config), one row of the table
// per bucket of each field.
tc::CtrModelConfig model_config(const Settings& s) {
  tc::CtrModelConfig c;
  c.dim = s.dim;
  c.hidden = s.hidden;
  return c;
}

// A batch of the sparse readers as the form's columns (ids, dense, label); one it cannot
// take ends the dataset with the error (as the readers' own errors do).
tc::Batch form_columns(const tc::CtrModelConfig& c, const tc::Batch& sparse) {
  tc::Batch out;
  if (auto st = tc::keras::ctr_columns(c, sparse, /*weighted=*/false, /*labels=*/true, out); !st)
    tc::Expected<int>(st.error()).value();
  return out;
}

troupe::ModelSpec model_spec(const Settings& s) {
  const tc::CtrModelConfig c = model_config(s);
  troupe::ModelSpec m;
  m.name = "deepfm";
  m.keras = troupe::keras_source(
      "deepfm.json",
      tc::keras::ctr_model_config(c, c.fields * s.buckets, s.optimizer, s.lr).dump());
  if (s.table.dynamic()) m.keras_options.dynamic_tables["embedding"] = s.table.spec;
  const std::string path = s.data + "/heldout" + s.ext();
  const auto format = s.record_format();
  const tc::CriteoOptions criteo = s.table.criteo(s.buckets);
  m.eval_batches = [c, path, format, criteo]() -> tc::Expected<std::vector<tc::Batch>> {
    auto examples = tc::read_examples(path, format, criteo);
    if (!examples) return examples.error();
    constexpr size_t size = 4096;
    std::vector<tc::Batch> out;
    for (size_t i = 0; i < examples->size(); i += size) {
      const auto first = examples->begin() + static_cast<std::ptrdiff_t>(i);
      const auto last =
          examples->begin() + static_cast<std::ptrdiff_t>(std::min(examples->size(), i + size));
      tc::Batch columns;
      if (auto st = tc::keras::ctr_columns(c, tc::collate({first, last}), false, true, columns);
          !st)
        return tc::make_error(st.error().code, path + ": " + st.error().message);
      out.push_back(std::move(columns));
    }
    return out;
  };
  m.device = s.device.device;
  m.precision = s.device.precision;
  return m;
}

troupe::Registry make_registry(const Settings& s) {
  troupe::Registry r;
  r.add_dataset("clicks", [s](const tc::InputContext& ctx) {
    tc::SparseInputOptions o;
    o.format = s.record_format();
    o.criteo = s.table.criteo(s.buckets);
    o.batch = static_cast<size_t>(s.batch);
    const tc::CtrModelConfig c = model_config(s);
    return troupe::examples::ctr_train_batches(s.data, s.ext(), ctx, o)
        .map([c](const tc::Batch& b) { return form_columns(c, b); });
  });
  troupe::register_model(r, model_spec(s));
  return r;
}

int fail(const std::string& what) {
  return troupe::examples::fail("ctr_fit", what);
}

int fail(const troupe::core::Error& e) {
  return troupe::examples::fail("ctr_fit", e);
}

int run_evaluator(const Settings& s) {
  return troupe::examples::run_evaluator_task(
      "ctr_fit", model_spec(s), s.model_dir, s.evaluator_timeout_s,
      nlohmann::json{{"teacher_auc", troupe::examples::read_teacher(s.data).auc}});
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"DeepFM with fit() and a side-car evaluator (run under troupe launch)"};
  Settings s;
  app.add_option("--data", s.data, "a directory as ctr_datagen writes it")->required();
  app.add_option("--format", s.format)->check(CLI::IsMember({"criteo", "tfrecord"}));
  app.add_option("--model-dir", s.model_dir, "checkpoints and logs (default: the run directory)");
  app.add_option("--dim", s.dim)->check(CLI::Range(1, 1024));
  app.add_option("--hidden", s.hidden);
  app.add_option("--buckets-per-field", s.buckets)
      ->check(CLI::Range(int64_t{1}, (int64_t{1} << 56) / 26));
  app.add_option("--batch", s.batch)->check(CLI::Range(1, 1 << 20));
  app.add_option("--epochs", s.epochs)->check(CLI::PositiveNumber);
  app.add_option("--steps-per-epoch", s.steps_per_epoch)->check(CLI::PositiveNumber);
  app.add_option("--steps-per-execution", s.steps_per_execution)->check(CLI::Range(1, 1000));
  int ps_replicas = 1;
  troupe::examples::add_ps_replicas_flag(app, ps_replicas);
  troupe::core::RowLayout shard_rows = troupe::core::RowLayout::range;
  troupe::examples::add_shard_rows_flag(app, shard_rows);
  app.add_option("--optimizer", s.optimizer)
      ->check(CLI::IsMember({"adagrad", "adam", "ftrl", "sgd"}));
  app.add_option("--lr", s.lr);
  app.add_option("--evaluator-timeout-s", s.evaluator_timeout_s)->check(CLI::PositiveNumber);
  app.add_option("--export", s.export_path,
                 "after training, write the model for troupe predict / troupe::Predictor here "
                 "(a name ending in .keras: as a Keras model)");
  app.add_option("--export-min-count", s.export_min_count,
                 "dynamic: export only rows seen at least K times")
      ->check(CLI::Range(0, 65535));
  s.table.add(app);
  s.device.add(app);
  s.wire.add(app);
  if (auto end = troupe::examples::parse_command_line(app, argc, argv, "ctr_fit")) return *end;
  if (s.table.dynamic() && troupe::is_keras_path(s.export_path))
    return fail("--export " + s.export_path +
                ": a dynamic table (rows by raw 64-bit key) has no Keras form; export a .tmodel");
  if (auto st = troupe::examples::check_spelling(s.device); !st) return fail(st.error());
  const auto wire = s.wire.parse();
  if (!wire) return fail(wire.error());
  for (int64_t h : s.hidden)
    if (h < 1 || h > 65536) return fail("--hidden widths must be in [1, 65536]");
  if (s.model_dir.empty()) {
    const char* run_dir = std::getenv("TROUPE_RUN_DIR");
    if (run_dir == nullptr) return fail("--model-dir is needed outside troupe launch");
    s.model_dir = std::string(run_dir) + "/model";
  }

  const auto registry = make_registry(s);
  auto resolver = troupe::net::TFConfigClusterResolver::from_env(troupe::net::default_ps_jobs);
  if (!resolver) return fail(resolver.error());
  const std::string role = resolver->task().type;
  if (role == "evaluator") return run_evaluator(s);
  if (role != "chief") {
    troupe::net::NodeOptions node;
    node.wire_dtype = *wire;
    return troupe::examples::serve_task("ctr_fit", *resolver, registry, node);
  }

  const auto t_start = clock_type::now();
  const int num_ps = resolver->cluster_spec().num_tasks("ps");
  troupe::StrategyOptions strategy_options;
  strategy_options.ps_replicas = ps_replicas;
  strategy_options.row_layout = shard_rows;
  auto strategy = troupe::ParameterServerStrategy::make(
      *resolver, std::make_shared<tc::FixedShardsPartitioner>(std::max(1, num_ps)),
      strategy_options);
  if (!strategy) return fail(strategy.error());
  troupe::Model model(model_spec(s));
  troupe::FitOptions o;
  o.epochs = s.epochs;
  o.steps_per_epoch = s.steps_per_epoch;
  o.steps_per_execution = s.steps_per_execution;
  o.validation = troupe::FitOptions::Validation::distributed;
  namespace cb = troupe::callbacks;
  auto checkpoint = std::make_shared<cb::ModelCheckpoint>(
      s.model_dir + "/ckpt", cb::ModelCheckpoint::Options{3, 0, false, "val_loss"});
  auto h = troupe::fit(
      model, **strategy, {&registry, "clicks"}, o,
      {checkpoint, std::make_shared<cb::MetricsLog>(s.model_dir + "/logs/metrics.jsonl")});
  auto shutdown = [&] {
    if (auto* c = model.coordinator_if_made()) c->shutdown_cluster();
  };
  if (!h) {
    shutdown();
    return fail(h.error());
  }
  const nlohmann::json bf16_requests = troupe::examples::ps_bf16_requests(**strategy);
  nlohmann::json exported = nullptr;
  if (!s.export_path.empty()) {
    // The trained model from the PS tasks, as `troupe export` writes it.
    const auto config = s.table.export_config(model_config(s), s.buckets, s.optimizer, s.lr);
    auto r = troupe::export_ctr_model(model, config, s.export_path, s.export_min_count);
    if (!r) {
      shutdown();
      return fail(r.error());
    }
    exported = {
        {"path", s.export_path}, {"rows", r->rows}, {"bytes", r->bytes}, {"seconds", r->seconds}};
  }
  auto ps_stats = (*strategy)->ps_stats();
  shutdown();
  const auto& last = h->epochs.back();
  auto metric = [&](const char* k) -> nlohmann::json {
    auto it = last.find(k);
    return it == last.end() ? nlohmann::json(nullptr) : nlohmann::json(it->second);
  };
  nlohmann::json out{
      {"ok", true},
      {"program", "ctr_fit"},
      {"workers", (*strategy)->num_workers()},
      {"ps", num_ps},
      {"epochs_run", h->epochs.size()},
      {"steps", h->steps},
      {"checkpoints", checkpoint->saves()},
      {"examples_per_sec",
       h->train_s > 0 ? static_cast<double>(h->steps_run * s.batch) / h->train_s : 0.0},
      {"loss", metric("loss")},
      {"auc", metric("auc")},
      {"val_loss", metric("val_loss")},
      {"val_auc", metric("val_auc")},
      {"teacher_auc", troupe::examples::read_teacher(s.data).auc},
      {"closures_retried", h->stats.retried},
      {"workers_lost", h->stats.workers_lost},
      {"model_dir", s.model_dir},
      {"train_s", h->train_s},
      {"wall_s", std::chrono::duration<double>(clock_type::now() - t_start).count()}};
  out["table"] = s.table.kind;
  out["export"] = exported;
  if (s.table.dynamic() && ps_stats) {
    const auto tables = troupe::examples::sum_tables(*ps_stats);
    out["table_rows"] = tables.table_rows;
    out["table_max_rows"] = s.table.spec.max_rows;
    out["rows_admitted"] = tables.rows_admitted;
    out["rows_evicted"] = tables.rows_evicted;
    out["grads_dropped_unadmitted"] = tables.grads_dropped_unadmitted;
  }
  troupe::examples::report_device(out, model);
  out["wire_dtype"] = troupe::net::wire_dtype_name(*wire);
  out["ps_bf16_requests"] = bf16_requests;
  out.update(troupe::examples::replication_json(ps_replicas, &h->stats));
  if (ps_stats) out.update(troupe::examples::ps_load_json(*ps_stats));
  std::cout << tc::json_text(out) << std::endl;
  return 0;
}
