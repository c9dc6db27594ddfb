// Click-through-rate training with parameter servers: DeepFM (or LR, FM, Wide&Deep) with its
// embedding table sharded over the PS tasks, as the SageMaker DeepFM trains on click logs.
//
//   build/bin/ctr_datagen --out /tmp/ctr --rows 1000000 --files 4
//   build/bin/troupe launch --ps 2 --workers 2 -- build/bin/ctr_ps --data /tmp/ctr
//
// Each step a worker takes a batch from its shard of the files (read and parsed ahead on a
// background thread), pulls the dense variables and only the unique table rows the batch
// touches, computes gradients, and pushes the dense gradients and the rows' gradients; the
// PS tasks apply them (sparse Adagrad by default). The chief then scores the held-out file,
// reading only the rows it needs, and prints one JSON line: examples/s, AUC and log loss
// next to the data's teacher AUC, rows and bytes per step, and each PS task's memory.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <iostream>
#include <memory>
#include <thread>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "core/data/guard.hpp"
#include "core/data/sparse_input.hpp"
#include "core/json_text.hpp"
#include "core/keras/ctr_graph.hpp"
#include "core/metrics.hpp"
#include "core/nn/ctr_export.hpp"
#include "core/nn/ctr_model.hpp"
#include "core/nn/losses.hpp"
#include "core/optimizer.hpp"
#include "core/parallel.hpp"
#include "ctr_chief.hpp"
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

constexpr const char* kTable = "embedding";

struct Settings {
  std::string data;     // a ctr_datagen directory, or a training stream (ctr_is_stream)
  std::string heldout;  // the file the chief scores; default: the directory's heldout file
  std::string format = "criteo";
  std::string model = "deepfm";
  int dim = 16;
  std::vector<int64_t> hidden = {400, 400, 400};
  int64_t buckets = 1 << 20;
  troupe::examples::TableFlags table;  // --table fixed|dynamic and the dynamic table's flags
  int batch = 1024;
  int steps_per_worker = 200;
  std::string optimizer = "adagrad";
  float lr = 0.05f;
  std::string partitioner = "fixed";
  int shards = 0;  // fixed: 0 means one per PS task
  int64_t shard_bytes = 64 << 20;
  uint64_t seed = 1;
  size_t shuffle_buffer = 0;
  bool cache = false;
  int eval_batch = 4096;
  troupe::examples::DeviceFlags device;  // where the workers compute
  troupe::examples::WireFlag wire;

  tc::CtrModelConfig model_config() const {
    tc::CtrModelConfig c;
    c.kind = tc::parse_ctr_kind(model).value();
    c.fields = tc::criteo_categorical_fields;
    c.dense = tc::criteo_integer_fields;
    c.dim = dim;
    c.hidden = hidden;
    c.seed = seed;
    return c;
  }
  int64_t table_rows() const { return buckets * tc::criteo_categorical_fields; }
  tc::SparseInputOptions input(size_t batch_size) const {
    tc::SparseInputOptions o;
    o.format = tc::parse_sparse_format(format).value();
    o.criteo = table.criteo(buckets);
    o.batch = batch_size;
    o.shuffle_buffer = shuffle_buffer;
    o.seed = seed;
    o.cache = cache;
    return o;
  }
  std::string extension() const { return format == "tfrecord" ? ".tfrecord" : ".txt"; }
  /// The held-out file to score; empty when there is none (a stream without --heldout).
  std::string heldout_file() const {
    if (!heldout.empty()) return heldout;
    return troupe::examples::ctr_is_stream(data) ? std::string() : data + "/heldout" + extension();
  }
};

// What a sampled step reports back.
struct StepReport {
  float loss = 0;
  int64_t rows = 0;  // unique table rows pulled (and pushed)
  MSGPACK_DEFINE(loss, rows);
};

// This process's model: the built-in model's Keras form as a layer graph over the PS
// variables (core/keras/ctr_graph.hpp), with its loss and device. Only one thread uses a
// replica at a time (a worker's step; the chief's evaluation).
struct Replica {
  tc::keras::CtrGraph model;
  tc::SigmoidBinaryCrossEntropy loss;
  troupe::examples::WorkerDevice device;
  explicit Replica(const Settings& s)
      : model(s.model_config(), s.table_rows(), s.table.dynamic()) {}
};

troupe::Registry make_registry(const Settings& s) {
  troupe::Registry r;
  r.add_dataset("ctr_train", [s](const tc::InputContext& ctx) {
    return troupe::examples::ctr_train_batches(s.data, s.extension(), ctx,
                                               s.input(static_cast<size_t>(s.batch)));
  });
  auto replica = std::make_shared<Replica>(s);
  r.add_step("ctr_step",
             [replica, s](troupe::StepContext& ctx,
                          troupe::PerWorkerDataset ds) -> tc::Expected<StepReport> {
               Replica& m = *replica;
               if (auto st = m.device.place(
                       s.device, "ctr_ps",
                       [&](tc::Device d, tc::Precision p) { return m.model.to(d, p); });
                   !st)
                 return st.error();
               auto batch = ctx.next_batch(ds);
               if (!batch) return batch.error();
               if (!*batch)
                 return tc::make_error(tc::Errc::out_of_range, "the training data ended");
               const tc::Batch& b = **batch;
               if (auto st = m.model.feed(b); !st) return st.error();
               auto values = ctx.pull(m.model.names());
               if (!values) return values.error();
               auto rows = ctx.pull_rows(kTable, m.model.ids());
               if (!rows) return rows.error();
               if (auto st = m.model.assign(std::move(*values)); !st) return st.error();
               if (auto st = m.model.give_rows(*rows); !st) return st.error();
               auto logits = m.model.forward(/*training=*/true);
               if (!logits) return logits.error();
               m.loss.set_grad_scale(m.device.grad_scale());
               auto loss = m.loss.forward(*logits, b.labels.data());
               if (!loss) return loss.error();
               if (!std::isfinite(*loss))
                 return tc::make_error(tc::Errc::invalid_argument, "loss is not finite");
               m.model.backward(m.loss.backward());
               const StepReport report{*loss, static_cast<int64_t>(m.model.ids().size())};
               if (!m.device.finish_scaled_step(m.model.gradients()))
                 return report;  // float16 overflow
               if (auto st = ctx.push(m.model.dense_grads()); !st) return st.error();
               if (auto st = ctx.push_rows(kTable, m.model.ids(), m.model.row_grads()); !st)
                 return st.error();
               return report;
             });
  return r;
}

struct Scores {
  double auc = 0, logloss = 0;
  int64_t examples = 0;
};

// Scores the held-out file on the chief, reading the dense variables once and, per batch,
// only the table rows the batch uses.
tc::Expected<Scores> evaluate(const Settings& s, troupe::ParameterServerStrategy& strategy,
                              const std::vector<troupe::Variable>& dense,
                              const troupe::Variable& table) {
  Replica m(s);
  std::vector<tc::Tensor> values;
  for (const auto& v : dense) {
    auto value = strategy.read(v);
    if (!value) return value.error();
    values.push_back(std::move(*value));
  }
  if (auto st = m.model.assign(std::move(values)); !st) return st.error();
  auto o = s.input(static_cast<size_t>(s.eval_batch));
  o.epochs = 1;
  o.drop_remainder = false;
  o.shuffle_buffer = 0;
  o.cache = false;
  tc::AUC auc(10000);
  tc::Mean logloss;
  Scores out;
  auto status = tc::guard_user_data("held-out data", [&] {
    auto it = tc::sparse_input({s.heldout_file()}, tc::InputContext{}, o).make_iterator();
    while (auto b = it->next()) {
      if (auto st = m.model.feed(*b); !st) throw tc::BadExpectedAccess(st.error());
      if (auto st = m.model.give_rows(strategy.read_rows(table, m.model.ids()).value()); !st)
        throw tc::BadExpectedAccess(st.error());
      const tc::Tensor logits = tc::Tensor::from_view(m.model.forward(/*training=*/false).value());
      std::vector<float> p(static_cast<size_t>(b->size()));
      for (int64_t i = 0; i < b->size(); ++i) {
        const double z = logits[i], y = b->labels[static_cast<size_t>(i)];
        p[static_cast<size_t>(i)] = static_cast<float>(1 / (1 + std::exp(-z)));
        // log(1 + e^-|z|) + max(z, 0) - z y: the loss without overflow
        logloss.update(std::log1p(std::exp(-std::abs(z))) + std::max(z, 0.0) - z * y);
      }
      auc.update(tc::ConstTensorView(p.data(), tc::Shape{b->size()}), b->labels.data());
      out.examples += b->size();
    }
  });
  if (!status) return status.error();
  out.auc = auc.result();
  out.logloss = logloss.result();
  return out;
}

int fail(const std::string& what) {
  return troupe::examples::fail("ctr_ps", what);
}

int fail(const troupe::core::Error& e) {
  return troupe::examples::fail("ctr_ps", e);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Click-through-rate training with parameter servers (run under troupe launch)"};
  Settings s;
  app.add_option("--data", s.data,
                 "a directory as ctr_datagen writes it (its train-* files may be FIFOs, one per "
                 "worker), or a training stream: - (standard input) or a FIFO; {worker} in it "
                 "becomes the worker's index")
      ->required();
  app.add_option("--heldout", s.heldout,
                 "the file the chief scores after training (default: the directory's heldout "
                 "file; none for a stream)");
  app.add_option("--format", s.format)->check(CLI::IsMember({"criteo", "tfrecord"}));
  app.add_option("--model", s.model)->check(CLI::IsMember({"deepfm", "fm", "lr", "wide_deep"}));
  app.add_option("--dim", s.dim, "embedding width")->check(CLI::Range(1, 1024));
  app.add_option("--hidden", s.hidden, "widths of the DNN's hidden layers");
  app.add_option("--buckets-per-field", s.buckets, "hash buckets of each of the 26 fields")
      ->check(CLI::Range(int64_t{1}, (int64_t{1} << 56) / 26));
  s.table.add(app);
  app.add_option("--batch", s.batch)->check(CLI::Range(1, 1 << 20));
  app.add_option("--steps-per-worker", s.steps_per_worker,
                 "steps per worker; 0: until the training data ends (a stream)")
      ->check(CLI::NonNegativeNumber);
  int64_t stats_interval_ms = 5000;
  app.add_option("--stats-interval-ms", stats_interval_ms,
                 "how often the chief samples the PS tasks' memory and rows during training "
                 "(ps_memory_over_time; 0: never)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--optimizer", s.optimizer)
      ->check(CLI::IsMember({"adagrad", "adam", "ftrl", "sgd"}));
  app.add_option("--lr", s.lr);
  app.add_option("--partitioner", s.partitioner, "how the table is split over the PS tasks")
      ->check(CLI::IsMember({"fixed", "min_size", "max_size"}));
  app.add_option("--shards", s.shards, "fixed: shards per variable (0: one per PS task)");
  int ps_replicas = 1;
  troupe::examples::add_ps_replicas_flag(app, ps_replicas);
  troupe::core::RowLayout shard_rows = troupe::core::RowLayout::range;
  troupe::examples::add_shard_rows_flag(app, shard_rows);
  app.add_option("--shard-bytes", s.shard_bytes, "min_size / max_size: bytes per shard")
      ->check(CLI::PositiveNumber);
  app.add_option("--shuffle-buffer", s.shuffle_buffer, "records shuffled before batching");
  app.add_flag("--cache", s.cache, "keep parsed batches in memory after the first pass");
  app.add_option("--seed", s.seed);
  int intra_op_threads = 1;
  app.add_option("--intra-op-threads", intra_op_threads,
                 "threads each worker's step uses (dense layers, embedding gather/scatter)")
      ->check(CLI::Range(1, 64));
  std::string snapshot_dir;
  int64_t snapshot_interval_ms = 2000;
  app.add_option("--ps-snapshot-dir", snapshot_dir,
                 "PS tasks snapshot their shards into DIR/ps-N (written off the serving thread)");
  app.add_option("--ps-snapshot-interval-ms", snapshot_interval_ms)->check(CLI::PositiveNumber);
  int snapshot_full_every = 1;
  app.add_option("--ps-snapshot-full-every", snapshot_full_every,
                 "one PS snapshot in N is full, the others deltas: only the dynamic table's "
                 "rows changed since the snapshot before (1: every one full)")
      ->check(CLI::Range(1, 1 << 20));
  troupe::examples::PeriodicExport::Options exporting;
  app.add_option("--export", exporting.path,
                 "write the model for serving (troupe predict) to FILE from the live PS tasks "
                 "after training, and during it with --export-every-*; FILE.keras: as a Keras "
                 "model");
  app.add_option("--export-every-s", exporting.every_s, "export every S seconds while training")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--export-every-steps", exporting.every_steps,
                 "export every N closures scheduled while training")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--export-min-count", exporting.min_count,
                 "dynamic: export only rows seen at least K times")
      ->check(CLI::Range(0, 1 << 30));
  s.device.add(app);
  s.wire.add(app);
  if (auto end = troupe::examples::parse_command_line(app, argc, argv, "ctr_ps")) return *end;
  if (auto st = troupe::examples::check_spelling(s.device); !st) return fail(st.error());
  const auto wire = s.wire.parse();
  if (!wire) return fail(wire.error());
  for (int64_t h : s.hidden)
    if (h < 1 || h > 65536) return fail("--hidden widths must be in [1, 65536]");
  if (s.table.dynamic() && troupe::is_keras_path(exporting.path))
    return fail("--export " + exporting.path +
                ": a dynamic table (rows by raw 64-bit key) has no Keras form; export a .tmodel");

  tc::set_intra_op_threads(intra_op_threads);
  const auto registry = make_registry(s);
  auto resolver = troupe::net::TFConfigClusterResolver::from_env(troupe::net::default_ps_jobs);
  if (!resolver) return fail(resolver.error());
  if (resolver->task().type != "chief") {
    troupe::net::NodeOptions node;
    node.ps_snapshot_dir = snapshot_dir;
    node.wire_dtype = *wire;
    node.ps_snapshot_interval = std::chrono::milliseconds(snapshot_interval_ms);
    node.ps_snapshot_full_every = snapshot_full_every;
    return troupe::examples::serve_task("ctr_ps", *resolver, registry, node);
  }

  const auto t_start = clock_type::now();
  const int num_ps = resolver->cluster_spec().num_tasks("ps");
  std::shared_ptr<const tc::Partitioner> partitioner;
  if (s.partitioner == "fixed")
    partitioner = std::make_shared<tc::FixedShardsPartitioner>(s.shards > 0 ? s.shards : num_ps);
  else if (s.partitioner == "min_size")
    partitioner = std::make_shared<tc::MinSizePartitioner>(s.shard_bytes, std::max(1, num_ps));
  else
    partitioner = std::make_shared<tc::MaxSizePartitioner>(s.shard_bytes);
  troupe::StrategyOptions strategy_options;
  strategy_options.ps_replicas = ps_replicas;
  strategy_options.row_layout = shard_rows;
  auto strategy = troupe::ParameterServerStrategy::make(*resolver, partitioner, strategy_options);
  if (!strategy) return fail(strategy.error());

  const auto config = s.model_config();
  const auto export_config = s.table.export_config(config, s.buckets, s.optimizer, s.lr);
  if (auto st = troupe::examples::write_model_description(export_config, snapshot_dir); !st)
    return fail(st.error());
  const tc::Initializer table_init{tc::Initializer::Kind::random_uniform, 0.05f, s.seed};
  tc::Expected<troupe::Variable> table = tc::make_error(tc::Errc::internal, "no table");
  if (s.table.dynamic()) {
    s.table.spec.width = config.row_width();
    s.table.spec.shards = s.shards;
    table = (*strategy)->create_dynamic_table(kTable, s.table.spec, table_init, s.optimizer, s.lr);
  } else {
    table = (*strategy)->create_variable(kTable, tc::Shape{s.table_rows(), config.row_width()},
                                         table_init, s.optimizer, s.lr);
  }
  if (!table) return fail(table.error());
  const tc::keras::CtrGraph shapes(config, s.table_rows(), s.table.dynamic());
  std::vector<troupe::Variable> dense;
  uint64_t seed = s.seed + 1;
  for (size_t i = 0; i < shapes.names().size(); ++i) {
    const bool kernel = shapes.shapes()[i].rank() == 2;
    auto v =
        (*strategy)->create_variable(shapes.names()[i], shapes.shapes()[i],
                                     tc::Initializer{kernel ? tc::Initializer::Kind::glorot_uniform
                                                            : tc::Initializer::Kind::zeros,
                                                     0.0f, seed++},
                                     s.optimizer, s.lr);
    if (!v) return fail(v.error());
    dense.push_back(*v);
  }
  troupe::examples::PeriodicExport exports(exporting, export_config, dense, *table);
  const int workers = (*strategy)->num_workers();
  if (troupe::examples::ctr_is_stream(s.data))
    if (auto one = troupe::examples::ctr_stream_path(s.data, 0, workers); !one)
      return fail(one.error());
  // Closures wait for room beyond 32 a worker (8 in flight at each, the rest queued): the
  // chief then schedules as the job goes, samples the PS tasks' memory between, and an
  // unbounded stream does not queue closures without end.
  troupe::CoordinatorOptions copt;
  copt.max_pending_closures = static_cast<size_t>(32 * workers);
  auto coord = troupe::ClusterCoordinator::make(**strategy, copt);
  if (!coord) return fail(coord.error());
  auto ds = (*coord)->create_per_worker_dataset("ctr_train");
  if (!ds) return fail(ds.error());

  const bool until_end = s.steps_per_worker == 0;
  const int64_t steps_wanted = static_cast<int64_t>(s.steps_per_worker) * workers;
  std::deque<troupe::RemoteValue<StepReport>> sampled;
  double rows_per_step = 0, last_loss = 0;
  int64_t reports = 0;
  auto take_report = [&] {
    if (auto v = sampled.front().fetch(); v) {
      rows_per_step += static_cast<double>(v->rows);
      last_loss = v->loss;
      ++reports;
    }
    sampled.pop_front();
  };
  troupe::examples::MemoryTimeline timeline{std::chrono::milliseconds(stats_interval_ms)};
  const auto t0 = clock_type::now();
  for (int64_t i = 0; until_end || i < steps_wanted; ++i) {
    timeline.maybe_sample(**strategy, t0);
    exports.maybe(**strategy, i);
    if (i % 10 == 9) {
      sampled.push_back((*coord)->schedule<StepReport>("ctr_step", *ds));
      if (sampled.size() > 64) take_report();  // long done: back-pressure keeps 32 a worker
    } else if (auto st = (*coord)->schedule_no_result("ctr_step", 1, *ds); !st) {
      break;  // join() returns the error
    }
  }
  auto joined = (*coord)->join();
  const double train_s = std::chrono::duration<double>(clock_type::now() - t0).count();
  // On a stream, the first worker whose stream ends ends the run (as an OutOfRangeError
  // ends TensorFlow's): what was queued behind it is cancelled.
  const bool data_ended = !joined && until_end && joined.error().code == tc::Errc::out_of_range;
  if (!joined && !data_ended) {
    (*coord)->shutdown_cluster();
    return fail(joined.error());
  }
  while (!sampled.empty())
    take_report();
  if (data_ended && (*coord)->stats().completed == 0) {
    (*coord)->shutdown_cluster();
    return fail("--data " + tc::record_source_name(s.data) +
                ": the training data ended before the first step (" + joined.error().message + ")");
  }
  rows_per_step /= std::max<int64_t>(1, reports);
  const int64_t steps = (*coord)->stats().completed;
  timeline.maybe_sample(**strategy, t0);
  // With PS snapshots: wait (at most 30 s) until each PS task's newest snapshot holds every
  // update, so that `troupe export --checkpoint` exports the model scored below.
  bool final_snapshot = false;
  if (!snapshot_dir.empty()) {
    const auto until = clock_type::now() + std::chrono::seconds(30);
    while (!final_snapshot && clock_type::now() < until) {
      auto st = (*strategy)->ps_stats();
      final_snapshot = st && std::all_of(st->begin(), st->end(), [](const troupe::PsTaskStats& p) {
                         return p.snapshot_updates == p.updates_applied;
                       });
      if (!final_snapshot) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  auto exported = exports.last(**strategy);
  auto ps_stats = (*strategy)->ps_stats();
  tc::Expected<Scores> scores = Scores{};
  if (!s.heldout_file().empty()) scores = evaluate(s, **strategy, dense, *table);
  const auto stats = (*coord)->stats();
  const auto shutdown = (*coord)->shutdown_cluster();
  if (!shutdown) std::cerr << "ctr_ps: " << shutdown.error().message << std::endl;
  if (!scores) return fail(scores.error());
  if (!exported) return fail(exported.error());

  const auto teacher = troupe::examples::ctr_is_stream(s.data)
                           ? troupe::examples::TeacherFigures{}
                           : troupe::examples::read_teacher(s.data);
  const bool scored = !s.heldout_file().empty();
  auto or_null = [&](double v) { return scored ? nlohmann::json(v) : nlohmann::json(); };
  int64_t dense_params = 0;
  for (const auto& shape : shapes.shapes())
    dense_params += shape.num_elements();
  const int64_t width = config.row_width();
  // Pull: row ids out, rows back; push: ids and gradients out; dense values both ways, in
  // the wire's type.
  const double value_bytes = *wire == troupe::net::WireDtype::bfloat16 ? 2.0 : 4.0;
  const double bytes_per_step =
      rows_per_step * (2 * 8 + 2 * value_bytes * width) + 2 * value_bytes * dense_params;
  nlohmann::json ps_json = nlohmann::json::array(), ps_rss = nlohmann::json::array();
  // The dynamic table's figures, summed over the PS tasks.
  const troupe::PsTaskStats tables =
      ps_stats ? troupe::examples::sum_tables(*ps_stats) : troupe::PsTaskStats{};
  if (ps_stats)
    for (auto& p : *ps_stats) {
      ps_rss.push_back(p.rss_bytes);
      ps_json.push_back({{"rss_mb", static_cast<double>(p.rss_bytes) / (1 << 20)},
                         {"table_rows", p.table_rows},
                         {"table_mb", static_cast<double>(p.table_bytes) / (1 << 20)},
                         {"shards", p.variables},
                         {"snapshots", p.snapshots},
                         {"snapshot_copy_ms", static_cast<double>(p.snapshot_copy_us) / 1000},
                         {"snapshot_write_ms", p.snapshot_write_ms},
                         {"snapshot_full_bytes", p.snapshot_full_bytes},
                         {"snapshot_delta_bytes", p.snapshot_delta_bytes},
                         {"updates_applied", p.updates_applied},
                         {"snapshot_updates", p.snapshot_updates},
                         {"bf16_requests", p.bf16_requests}});
    }
  const bool dynamic = s.table.dynamic();
  // A fixed table's payload: every row's value and optimizer slots.
  const auto slots = tc::make_optimizer(s.optimizer, s.lr).value()->slot_names().size();
  const int64_t fixed_table_bytes =
      s.table_rows() * config.row_width() * 4 * static_cast<int64_t>(1 + slots);
  const int64_t examples = steps * s.batch;
  nlohmann::json out{
      {"ok", true},
      {"program", "ctr_ps"},
      {"model", s.model},
      {"format", s.format},
      {"workers", workers},
      {"ps", num_ps},
      {"batch", s.batch},
      {"steps", steps},
      {"examples", examples},
      {"examples_per_sec", static_cast<double>(examples) / train_s},
      {"table", s.table.kind},
      {"table_rows", dynamic ? tables.table_rows : s.table_rows()},
      {"table_max_rows", dynamic ? s.table.spec.max_rows : s.table_rows()},
      {"rows_admitted", tables.rows_admitted},
      {"rows_evicted", tables.rows_evicted},
      {"grads_dropped_unadmitted", tables.grads_dropped_unadmitted},
      {"table_bytes", dynamic ? tables.table_bytes : fixed_table_bytes},
      {"ps_rss_bytes", ps_rss},
      {"snapshot_full_bytes", tables.snapshot_full_bytes},
      {"snapshot_delta_bytes", tables.snapshot_delta_bytes},
      {"final_snapshot", final_snapshot},
      {"export", exports.json()},
      {"table_width", width},
      {"table_shards", table->num_shards},
      {"dense_params", dense_params},
      {"optimizer", s.optimizer},
      {"intra_op_threads", intra_op_threads},
      {"worker_device", s.device.device},
      {"precision", s.device.precision},
      {"wire_dtype", troupe::net::wire_dtype_name(*wire)},
      {"cpu_features", troupe::core::cpu_feature_names()},
      {"data_ended", data_ended},
      {"auc", or_null(scores->auc)},
      {"logloss", or_null(scores->logloss)},
      {"eval_examples", scores->examples},
      {"teacher_auc", teacher.auc},
      {"teacher_logloss", teacher.logloss},
      {"last_loss", last_loss},
      {"rows_per_step", rows_per_step},
      {"bytes_per_step", bytes_per_step},
      {"ps_tasks", ps_json},
      {"ps_memory_over_time", timeline.json()},
      {"closures_retried", stats.retried},
      {"workers_lost", stats.workers_lost},
      {"shutdown_acknowledged", shutdown.ok()},
      {"train_s", train_s},
      {"wall_s", std::chrono::duration<double>(clock_type::now() - t_start).count()}};
  out.update(troupe::examples::replication_json(ps_replicas, &stats));
  if (ps_stats) out.update(troupe::examples::ps_load_json(*ps_stats));
  std::cout << tc::json_text(out) << std::endl;
  return 0;
}
