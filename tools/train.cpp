#include "tools/train.hpp"

#include "tools/data_files.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <iostream>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "api/model_state.hpp"
#include "core/data/named_input.hpp"
#include "core/json_text.hpp"
#include "examples/serve_task.hpp"
#include "net/slurm.hpp"
#include "troupe/troupe.hpp"

namespace troupe::tools {

namespace fs = std::filesystem;
using core::Errc;
using core::make_error;

namespace {

constexpr const char* kProgram = "troupe train";

int fail(const core::Error& e) {
  return examples::fail(kProgram, e);
}

core::Expected<KerasOptions> keras_options(const TrainOptions& o) {
  KerasOptions k;
  for (const auto& l : o.labels) {
    const auto eq = l.find('=');
    if (eq == std::string::npos) {
      k.labels[""] = l;  // the only output's: resolved below
    } else {
      k.labels[l.substr(0, eq)] = l.substr(eq + 1);
    }
  }
  for (const auto& layer : o.dynamic_tables) {
    DynamicTableSpec t;
    t.max_rows = o.dynamic_max_rows;
    k.dynamic_tables[layer] = t;
  }
  k.compile_json = o.compile;
  k.seed = o.seed;
  return k;
}

// --label COLUMN for a model of one output names that output's labels.
core::Status resolve_labels(KerasOptions& k, const KerasSource& source) {
  auto it = k.labels.find("");
  if (it == k.labels.end()) return {};
  const std::string column = it->second;
  k.labels.erase(it);
  KerasOptions probe = k;
  auto r = detail::GraphReplica::make(source, probe);
  if (!r) return r.error();
  const auto& outs = (*r)->graph().outputs();
  if (outs.size() != 1)
    return make_error(Errc::invalid_argument,
                      "the model has " + std::to_string(outs.size()) +
                          " outputs: give each its labels as --label OUTPUT=COLUMN");
  k.labels[outs[0].name] = column;
  return {};
}

core::NamedInputOptions input_options(const TrainOptions& o, core::DataFormat format,
                                      std::vector<core::FeatureSpec> specs, int64_t epochs) {
  core::NamedInputOptions d;
  d.format = format;
  d.features = std::move(specs);
  d.batch = static_cast<size_t>(o.batch);
  d.shuffle_buffer = static_cast<size_t>(o.shuffle);
  d.seed = o.seed;
  d.epochs = epochs;
  return d;
}

nlohmann::json history_json(const History& h, int64_t batch) {
  nlohmann::json out = nlohmann::json::object();
  if (!h.epochs.empty())
    for (const auto& [k, v] : h.epochs.back())
      out[k] = v;
  out["examples_per_sec"] =
      h.train_s > 0 ? static_cast<double>(h.steps_run * batch) / h.train_s : 0.0;
  out["steps"] = h.steps;
  out["epochs_run"] = h.epochs.size();
  return out;
}

}  // namespace

void add_train_options(CLI::App& app, TrainOptions& o) {
  app.add_option("--model", o.model, "a Keras model: a .keras file, or model.to_json()'s JSON")
      ->required();
  app.add_option("--data", o.data, "training files, or directories of them (repeatable)");
  app.add_option("--format", o.format)->check(CLI::IsMember({"tfrecord", "criteo", "idx", "csv"}));
  app.add_option("--label", o.labels,
                 "the label column: COLUMN for a model of one output, OUTPUT=COLUMN for each "
                 "of several (default: label; an output's own name when there are several)");
  app.add_option("--batch", o.batch)->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  app.add_option("--epochs", o.epochs)->check(CLI::PositiveNumber);
  app.add_option("--steps", o.steps,
                 "steps per epoch (required in a cluster; one process: one pass by default)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--validation", o.validation,
                 "validation files (scored after each epoch: by the workers, each batch once, "
                 "under PS tasks; else by the chief)");
  app.add_option("--device", o.device, "cpu, cuda or cuda:N (where workers compute)");
  app.add_option("--precision", o.precision,
                 "float32, tf32, mixed_bfloat16, mixed_float16 or auto");
  app.add_option("--out", o.out, "write the trained model here (.keras)");
  app.add_option("--model-dir", o.model_dir,
                 "checkpoints and the BackupAndRestore backup (default: the run directory)");
  app.add_option("--dynamic-table", o.dynamic_tables,
                 "an Embedding layer whose table is a dynamic table on the PS tasks (raw "
                 "64-bit ids; repeatable)");
  app.add_option("--dynamic-max-rows", o.dynamic_max_rows, "rows kept by each dynamic table")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--shuffle", o.shuffle, "examples in the shuffle buffer (0: file order)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--seed", o.seed);
  app.add_option("--steps-per-execution", o.steps_per_execution)->check(CLI::Range(1, 1000));
  app.add_option("--compile", o.compile,
                 "a compile_config as JSON (Keras's form) instead of the file's");
  examples::add_ps_replicas_flag(app, o.ps_replicas);
  examples::add_shard_rows_flag(app, o.shard_rows);
  app.add_option("--evaluator-timeout-s", o.evaluator_timeout_s,
                 "the evaluator task: how long it waits for a new checkpoint before it ends")
      ->check(CLI::PositiveNumber);
  app.add_flag("--elastic", o.elastic,
               "MultiWorkerMirroredStrategy (a job without PS tasks): a lost worker is left "
               "behind and taken back when it returns, instead of ending the job");
}

int run_train(TrainOptions o) {
  const auto t_start = std::chrono::steady_clock::now();

  // Workers and PS tasks serve the generic Keras steps: the model reaches them as data.
  // A job's task under TF_CONFIG (troupe launch, TFJob) or a Slurm step; else one process.
  const bool cluster =
      std::getenv("TF_CONFIG") != nullptr || std::getenv("SLURM_PROCID") != nullptr;
  std::optional<net::TFConfigClusterResolver> resolver;
  bool mirrored = false;
  bool evaluator = false;  // the side-car evaluator task: follows the chief's checkpoints
  Registry registry;
  register_keras(registry);
  if (cluster) {
    auto r = net::TFConfigClusterResolver::from_env(net::default_ps_jobs);
    if (!r) return fail(r.error());
    resolver = std::move(*r);
    const std::string role = resolver->task().type;
    // With PS tasks, ParameterServerStrategy: its PS tasks and workers serve. Without,
    // MultiWorkerMirroredStrategy: every worker trains a replica (worker 0 the chief).
    mirrored = resolver->cluster_spec().num_tasks("ps") == 0;
    if (!mirrored && (role == "ps" || role == "worker"))
      return examples::serve_task(kProgram, *resolver, registry);
    if (role == "evaluator") evaluator = true;
    if (role != "chief" && role != "evaluator" && !(mirrored && role == "worker"))
      return fail(make_error(Errc::invalid_argument, "troupe train has no " + role + " task"));
  }

  // The model file is the chief's (and an evaluator's or a mirrored replica's) to read: PS
  // tasks and workers got theirs above as data, and may not even see the file.
  auto source = read_keras_source(o.model);
  if (!source) return fail(source.error());
  auto kopts = keras_options(o);
  if (!kopts) return fail(kopts.error());
  if (auto st = resolve_labels(*kopts, **source); !st) return fail(st.error());

  if (o.data.empty() && !evaluator)
    return fail(make_error(Errc::invalid_argument, "--data is required"));
  if (evaluator && o.validation.empty())
    return fail(make_error(Errc::invalid_argument,
                           "the evaluator task scores --validation files: give them"));
  auto format = data_format_of(o.format, evaluator ? o.validation : o.data);
  if (!format) return fail(format.error());
  const std::string format_name = core::data_format_name(*format);
  auto files = expand_data_files(evaluator ? o.validation : o.data, format_name, evaluator);
  if (!files) return fail(files.error());
  std::vector<std::string> validation;
  if (!o.validation.empty()) {
    auto v = expand_data_files(o.validation, format_name, true);
    if (!v) return fail(v.error());
    validation = std::move(*v);
  }
  if (cluster && !mirrored && o.steps == 0)
    return fail(make_error(Errc::invalid_argument,
                           "--steps (per epoch) is required in a cluster: each worker's data "
                           "repeats, so an epoch is a number of steps"));

  ModelSpec spec;
  spec.keras = *source;
  spec.keras_options = *kopts;
  spec.device = o.device;
  spec.precision = o.precision;
  Model model(spec);
  if (!model.state().replica.status) return fail(model.state().replica.status.error());
  const auto specs = detail::feature_specs(*model.state().replica.graph);
  if (auto st = check_data_files(*files, *format, specs); !st) return fail(st.error());
  if (!validation.empty())
    model.state().spec.eval_batches = [=] {
      auto options = input_options(o, *format, specs, 1);
      options.drop_remainder = false;  // every validation example counts
      return core::read_named_batches(validation, options);
    };

  std::string model_dir = o.model_dir;
  if (model_dir.empty())
    if (const char* run_dir = std::getenv("TROUPE_RUN_DIR"))
      model_dir = std::string(run_dir) + "/model";
  if (evaluator) {
    if (model_dir.empty())
      return fail(
          make_error(Errc::invalid_argument, "--model-dir is needed outside troupe launch"));
    return examples::run_evaluator_task(kProgram, model.state().spec, model_dir,
                                        o.evaluator_timeout_s);
  }

  FitOptions fo;
  fo.epochs = o.epochs;
  fo.steps_per_epoch = o.steps;
  fo.steps_per_execution = o.steps_per_execution;
  fo.validation =
      validation.empty() ? FitOptions::Validation::none : FitOptions::Validation::direct;
  Callbacks callbacks;
  namespace cb = callbacks;
  if (!model_dir.empty() && cluster && !mirrored) {
    // A chief's backup holds every variable but dynamic tables (the PS tasks' snapshots do):
    // a job with one resumes from PS snapshots (troupe serve --ps-snapshot-dir), not here.
    if (o.dynamic_tables.empty())
      callbacks.push_back(std::make_shared<cb::BackupAndRestoreCallback>(model_dir + "/backup"));
    // What a side-car evaluator task follows: a checkpoint of the weights every epoch.
    callbacks.push_back(std::make_shared<cb::ModelCheckpoint>(model_dir + "/ckpt"));
  }
  callbacks.push_back(std::make_shared<cb::ProgressDisplay>());

  nlohmann::json out{{"ok", true},
                     {"program", kProgram},
                     {"model", o.model},
                     {"format", format_name},
                     {"batch", o.batch}};
  core::Expected<History> h = make_error(Errc::internal, "not run");
  std::unique_ptr<ParameterServerStrategy> strategy;
  std::unique_ptr<MultiWorkerMirroredStrategy> mirror;
  bool writes = true;  // this process writes --out (a mirrored job's chief only)
  Registry local;
  local.add_dataset("train", [&](const core::InputContext& ctx) {
    // --steps bounds each epoch of data that repeats (Keras's steps_per_epoch over a
    // repeated dataset); without it an epoch is one pass (over this replica's shard).
    return core::named_input(*files, ctx, input_options(o, *format, specs, o.steps > 0 ? -1 : 1));
  });
  if (!cluster) {
    h = fit(model, DatasetCreator{&local, "train", {}}, fo, callbacks);
  } else if (mirrored) {
    MirroredOptions mo;
    mo.elastic = o.elastic;
    auto s = MultiWorkerMirroredStrategy::make(*resolver, mo);
    if (!s) return fail(s.error());
    mirror = std::move(*s);
    writes = mirror->is_chief();
    h = fit(model, *mirror, DatasetCreator{&local, "train", {}}, fo, callbacks);
    out["workers"] = resolver->cluster_spec().num_tasks("worker");
    out["strategy"] = "mirrored";
  } else {
    const int num_ps = resolver->cluster_spec().num_tasks("ps");
    StrategyOptions so;
    so.ps_replicas = o.ps_replicas;
    so.row_layout = o.shard_rows;
    // As TensorFlow's tutorials advise: shards of at least 256 KiB, at most one per PS task,
    // so embedding tables split and small dense variables stay whole.
    auto s = ParameterServerStrategy::make(
        *resolver, std::make_shared<core::MinSizePartitioner>(256 << 10, std::max(1, num_ps)), so);
    if (!s) return fail(s.error());
    strategy = std::move(*s);
    // The workers get the model without its tables: they pull the rows they need.
    auto sent = worker_keras_source(model);
    if (!sent) return fail(sent.error());
    KerasJob job;
    job.source = *sent;
    job.options = *kopts;
    job.files = *files;
    job.validation = validation;
    job.data = input_options(o, *format, {}, -1);
    job.device = o.device;
    job.precision = o.precision;
    // Validation on the workers, each batch once, as fit() under TensorFlow's
    // ParameterServerStrategy evaluates: the chief only counts the batches.
    if (fo.validation != FitOptions::Validation::none)
      fo.validation = FitOptions::Validation::distributed;
    out["validation"] = validation.empty() ? "none" : "distributed";
    h = fit(model, *strategy, DatasetCreator{&registry, "keras", encode_keras_job(job)}, fo,
            callbacks);
    out["workers"] = strategy->num_workers();
    out["ps"] = num_ps;
  }
  auto shutdown = [&] {
    if (auto* c = model.coordinator_if_made()) c->shutdown_cluster();
  };
  if (!h) {
    shutdown();
    return fail(h.error());
  }
  const nlohmann::json history = history_json(*h, o.batch);
  for (const auto& [k, v] : history.items())
    out[k] = v;
  if (mirrored) {
    out["workers_lost"] = h->mirrored.workers_lost;
  } else if (cluster) {
    out["workers_lost"] = h->stats.workers_lost;
    out["closures_retried"] = h->stats.retried;
    out["worker_rejoins"] = h->stats.worker_rejoins;
    if (auto ps = strategy->ps_stats(); ps) out.update(examples::ps_load_json(*ps));
  }
  if (!o.out.empty() && writes) {
    if (auto st = save_keras(model, o.out); !st) {
      shutdown();
      return fail(st.error());
    }
    out["out"] = o.out;
  }
  shutdown();
  out["seconds"] =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  std::cout << core::json_text(out) << std::endl;
  return 0;
}

}  // namespace troupe::tools
