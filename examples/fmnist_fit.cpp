// Fashion-MNIST trained with fit() and every built-in callback, followed by a side-car
// evaluator. The same binary runs every task:
//
//   build/bin/troupe launch --ps 2 --workers 2 --evaluator -- build/bin/fmnist_fit
//   build/bin/troupe launch --workers 2 --evaluator -- build/bin/fmnist_fit
//
// With PS tasks the chief runs fit() with a ParameterServerStrategy (distributed
// validation after each epoch, checkpoints, a backup it resumes from if it is killed and
// restarted, TensorBoard summaries, a JSONL metrics log, early stopping, a progress
// display); PS and worker tasks serve. Without PS tasks every worker runs the same fit()
// with a MultiWorkerMirroredStrategy (--batch is then the global batch; the chief writes
// the checkpoints, backup and logs; --elastic keeps going when a worker dies and takes it
// back when launch restarts it). The evaluator follows the checkpoints, printing one JSON
// line for each. Without TF_CONFIG the same fit() runs in this one process.
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <memory>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "core/data/idx.hpp"
#include "core/json_text.hpp"
#include "core/keras/builtin_models.hpp"
#include "device_flags.hpp"
#include "examples/command_line.hpp"
#include "fmnist_data.hpp"
#include "serve_task.hpp"
#include "troupe/troupe.hpp"

namespace tc = troupe::core;
using clock_type = std::chrono::steady_clock;

namespace {

struct Settings {
  std::string data_dir = tc::fashion_mnist_dir;
  std::string model_dir;  // default: $TROUPE_RUN_DIR/fmnist_fit, or ./fmnist_fit-model
  int64_t epochs = 2;
  int64_t steps_per_epoch = 937;  // 60000 / 64
  int steps_per_execution = 1;
  int batch = 64;
  std::string optimizer = "adam";
  float lr = 0.001f;
  uint64_t seed = 1;
  std::string validation = "distributed";
  int64_t checkpoint_every = 0;  // steps; 0: every epoch
  int64_t backup_every = 0;      // steps; 0: every epoch
  int64_t patience = 2;
  int64_t evaluator_timeout_s = 600;
  std::string strategy = "auto";  // auto: parameter_server with PS tasks, else mirrored
  bool elastic = false;
  int min_workers = 1;
  std::string communication = "auto";
  troupe::examples::DeviceFlags device;  // where each process's replica computes
  troupe::examples::WireFlag wire;       // tensors between tasks: channel or all-reduce
  std::string export_path;               // the trained model as a Keras file, written by the chief
};

// The model: an MLP 784-128-10, its Keras form what --export writes (the image [28, 28]
// scaled by a Rescaling); trained as the same graph on the features [784] as
// load_fashion_mnist gives them, already scaled.
const tc::keras::ClassifierForm kForm{false, {784, 128, 10}, 1};

troupe::ModelSpec model_spec(const Settings& s) {
  troupe::ModelSpec m;
  m.name = "fmnist_mlp";
  tc::keras::ClassifierForm form = kForm;
  form.features = true;
  form.seed = s.seed;
  auto config = tc::keras::classifier_model_config(form, s.optimizer, s.lr);
  // Our own constant form: an error here is a bug, not the user's input.
  m.keras = troupe::keras_source("fmnist_mlp.json", config.value().dump());
  const std::string dir = s.data_dir;
  m.eval_batches = [dir]() -> tc::Expected<std::vector<tc::Batch>> {
    auto test = tc::load_fashion_mnist(dir, "t10k");
    if (!test) return test.error();
    std::vector<tc::Batch> out;
    for (size_t i = 0; i < test->size(); i += 1000)
      out.push_back(tc::collate_classes(
          {test->begin() + static_cast<std::ptrdiff_t>(i),
           test->begin() + static_cast<std::ptrdiff_t>(std::min(test->size(), i + 1000))}));
    return out;
  };
  m.device = s.device.device;
  m.precision = s.device.precision;
  return m;
}

troupe::Registry make_registry(const Settings& s) {
  troupe::Registry r;
  r.add_dataset("fmnist_train", [s](const tc::InputContext& ctx) {
    // Mirrored: each replica's part of the global batch (rounded down when an elastic
    // membership does not divide it); a PS worker's context has one replica.
    auto per = ctx.per_replica_batch_size(s.batch);
    const int64_t batch = per ? *per : std::max<int64_t>(1, s.batch / ctx.num_replicas_in_sync);
    return troupe::examples::fmnist_train_batches("fmnist_fit", s.data_dir, ctx,
                                                  static_cast<int>(batch), s.seed, 10000,
                                                  /*columns=*/true);
  });
  troupe::register_model(r, model_spec(s));
  return r;
}

int fail(const troupe::core::Error& e) {
  return troupe::examples::fail("fmnist_fit", e);
}

int run_evaluator(const Settings& s) {
  return troupe::examples::run_evaluator_task("fmnist_fit", model_spec(s), s.model_dir,
                                              s.evaluator_timeout_s);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Fashion-MNIST with fit() and callbacks (run under troupe launch, or alone)"};
  Settings s;
  app.add_option("--data-dir", s.data_dir);
  app.add_option("--model-dir", s.model_dir,
                 "checkpoints (ckpt/), the backup (backup/) and summaries (logs/)");
  app.add_option("--epochs", s.epochs)->check(CLI::PositiveNumber);
  app.add_option("--steps-per-epoch", s.steps_per_epoch)->check(CLI::PositiveNumber);
  app.add_option("--steps-per-execution", s.steps_per_execution)->check(CLI::Range(1, 1000));
  int ps_replicas = 1;
  troupe::examples::add_ps_replicas_flag(app, ps_replicas);
  app.add_option("--batch", s.batch, "batch per step (mirrored: the global batch)")
      ->check(CLI::PositiveNumber);
  app.add_option("--strategy", s.strategy, "under launch: parameter_server, mirrored, or auto")
      ->check(CLI::IsMember({"auto", "parameter_server", "mirrored"}));
  app.add_flag("--elastic", s.elastic, "mirrored: carry on when workers die; take them back");
  app.add_option("--min-workers", s.min_workers, "mirrored, elastic: fewer workers end the job")
      ->check(CLI::PositiveNumber);
  app.add_option("--communication", s.communication, "mirrored: auto, ring or nccl");
  app.add_option("--optimizer", s.optimizer);
  app.add_option("--lr", s.lr);
  app.add_option("--seed", s.seed);
  app.add_option("--validation", s.validation)
      ->check(CLI::IsMember({"none", "direct", "distributed"}));
  app.add_option("--checkpoint-every-steps", s.checkpoint_every, "0: every epoch")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--backup-every-steps", s.backup_every, "0: every epoch")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--export", s.export_path,
                 "after training, the chief writes the trained model here as a Keras file "
                 "(.keras; keras.saving.load_model and troupe predict load it)");
  app.add_option("--patience", s.patience, "early stopping on val_loss")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--evaluator-timeout-s", s.evaluator_timeout_s,
                 "the evaluator gives up after this long without a new checkpoint")
      ->check(CLI::PositiveNumber);
  s.device.add(app);
  s.wire.add(app);
  if (auto end = troupe::examples::parse_command_line(app, argc, argv, "fmnist_fit")) return *end;
  if (auto st = troupe::examples::check_spelling(s.device); !st) return fail(st.error());
  const auto wire = s.wire.parse();
  if (!wire) return fail(wire.error());
  if (s.model_dir.empty()) {
    const char* run_dir = std::getenv("TROUPE_RUN_DIR");
    s.model_dir = run_dir != nullptr ? std::string(run_dir) + "/fmnist_fit" : "fmnist_fit-model";
  }

  const auto registry = make_registry(s);
  const bool distributed = std::getenv("TF_CONFIG") != nullptr;
  std::optional<troupe::net::TFConfigClusterResolver> resolver;
  bool mirrored = false;
  if (distributed) {
    auto r = troupe::net::TFConfigClusterResolver::from_env();
    if (!r) return fail(r.error());
    resolver = *r;
    const std::string role = resolver->task().type;
    if (role == "evaluator") return run_evaluator(s);
    mirrored = s.strategy == "mirrored" ||
               (s.strategy == "auto" && resolver->cluster_spec().num_tasks("ps") == 0);
    if (!mirrored && role != "chief") {
      troupe::net::NodeOptions node;
      node.wire_dtype = *wire;
      return troupe::examples::serve_task("fmnist_fit", *resolver, registry, node);
    }
  }
  if (*wire != troupe::net::WireDtype::float32 && !distributed)
    return fail(tc::make_error(tc::Errc::invalid_argument,
                               "--wire-dtype " + s.wire.value +
                                   " applies to tensors between tasks, and this run is one "
                                   "process (run it under troupe launch)"));

  const auto t_start = clock_type::now();
  troupe::Model model(model_spec(s));
  troupe::FitOptions o;
  o.epochs = s.epochs;
  o.steps_per_epoch = s.steps_per_epoch;
  o.steps_per_execution = s.steps_per_execution;
  o.validation = s.validation == "none"     ? troupe::FitOptions::Validation::none
                 : s.validation == "direct" ? troupe::FitOptions::Validation::direct
                                            : troupe::FitOptions::Validation::distributed;
  if (!distributed && o.validation == troupe::FitOptions::Validation::distributed)
    o.validation = troupe::FitOptions::Validation::direct;
  o.coordinator.watchdog_timeout = std::chrono::seconds(30);

  namespace cb = troupe::callbacks;
  auto backup = std::make_shared<cb::BackupAndRestoreCallback>(
      s.model_dir + "/backup", cb::BackupAndRestoreCallback::Options{s.backup_every});
  auto checkpoint = std::make_shared<cb::ModelCheckpoint>(
      s.model_dir + "/ckpt",
      cb::ModelCheckpoint::Options{5, s.checkpoint_every, false, "val_loss"});
  auto early = std::make_shared<cb::EarlyStopping>(cb::EarlyStopping::Options{
      o.validation == troupe::FitOptions::Validation::none ? "loss" : "val_loss", 0.0, s.patience});
  troupe::Callbacks callbacks{backup,
                              checkpoint,
                              std::make_shared<cb::TensorBoard>(s.model_dir + "/logs"),
                              std::make_shared<cb::MetricsLog>(s.model_dir + "/logs/metrics.jsonl"),
                              early,
                              std::make_shared<cb::ProgressDisplay>()};

  std::unique_ptr<troupe::ParameterServerStrategy> strategy;
  std::unique_ptr<troupe::MultiWorkerMirroredStrategy> replicas;
  tc::Expected<troupe::History> h = tc::make_error(tc::Errc::internal, "not run");
  const troupe::DatasetCreator data{&registry, "fmnist_train"};
  if (mirrored) {
    troupe::MirroredOptions mo;
    auto comm = troupe::collective::parse_communication(s.communication);
    if (!comm) return fail(comm.error());
    mo.communication = *comm;
    mo.elastic = s.elastic;
    mo.min_workers = s.min_workers;
    mo.gradient_wire = troupe::net::element_type(*wire);
    auto device = troupe::select_device(s.device.device);  // this worker's, by local rank
    if (!device) return fail(device.error());
    mo.device = *device;
    auto st = troupe::MultiWorkerMirroredStrategy::make(*resolver, mo);
    if (!st) return fail(st.error());
    replicas = std::move(*st);
    h = troupe::fit(model, *replicas, data, o, callbacks);
  } else if (distributed) {
    troupe::StrategyOptions so;
    so.ps_replicas = ps_replicas;
    auto st = troupe::ParameterServerStrategy::make(*resolver, nullptr, so);
    if (!st) return fail(st.error());
    strategy = std::move(*st);
    h = troupe::fit(model, *strategy, data, o, callbacks);
  } else {
    h = troupe::fit(model, data, o, callbacks);
  }
  auto shutdown = [&] {
    if (auto* c = model.coordinator_if_made()) c->shutdown_cluster();
  };
  if (!h) {
    shutdown();
    return fail(h.error());
  }
  auto test = model.evaluate();  // the chief's own look at the final variables
  // The trained model back to Keras (core/keras/builtin_models.hpp), by the chief alone.
  tc::Status exported;
  const bool writes = !s.export_path.empty() && (!replicas || replicas->is_chief());
  if (test && writes) {
    auto weights = model.read_weights();
    exported = weights ? tc::keras::write_classifier_keras(s.export_path, kForm, weights->tensors,
                                                           s.optimizer, s.lr)
                       : tc::Status(weights.error());
  }
  const nlohmann::json bf16_requests =
      strategy ? troupe::examples::ps_bf16_requests(*strategy) : nlohmann::json(nullptr);
  shutdown();
  if (!test) return fail(test.error());
  if (!exported) return fail(exported.error());

  const auto& last = h->epochs.back();
  auto metric = [&](const char* k) -> nlohmann::json {
    auto it = last.find(k);
    return it == last.end() ? nlohmann::json(nullptr) : nlohmann::json(it->second);
  };
  nlohmann::json out{
      {"ok", true},
      {"program", "fmnist_fit"},
      {"strategy", mirrored      ? "mirrored"
                   : distributed ? "parameter_server"
                                 : "default"},
      {"chief", replicas ? replicas->is_chief() : true},
      {"workers", strategy   ? strategy->num_workers()
                  : replicas ? replicas->num_replicas_in_sync()
                             : 1},
      {"epochs", s.epochs},
      {"epochs_run", h->epochs.size()},
      {"initial_epoch", h->initial_epoch},
      {"resumed_from_step", h->initial_step},
      {"steps", h->steps},
      {"steps_run", h->steps_run},
      {"stopped_early", h->stopped_early},
      {"backups", backup->backups()},
      {"checkpoints", checkpoint->saves()},
      {"examples_per_sec",
       h->train_s > 0 ? static_cast<double>(h->steps_run * s.batch) / h->train_s : 0.0},
      {"loss", metric("loss")},
      {"val_loss", metric("val_loss")},
      {"val_accuracy", metric("val_accuracy")},
      {"test_loss", test->loss()},
      {"test_accuracy", model.logs(*test).at("accuracy")},
      {"model_dir", s.model_dir},
      {"export", writes ? nlohmann::json(s.export_path) : nlohmann::json(nullptr)},
      {"train_s", h->train_s},
      {"wall_s", std::chrono::duration<double>(clock_type::now() - t_start).count()}};
  troupe::examples::report_device(out, model);
  out["wire_dtype"] = troupe::net::wire_dtype_name(*wire);
  if (strategy) out["ps_bf16_requests"] = bf16_requests;
  if (mirrored) {
    out["elastic"] = s.elastic;
    out["reforms"] = h->mirrored.reforms;
    out["workers_lost"] = h->mirrored.workers_lost;
    out["workers_joined"] = h->mirrored.workers_joined;
    out["steps_redone"] = h->mirrored.steps_redone;
  } else if (distributed) {
    out["closures_scheduled"] = h->stats.scheduled;
    out["closures_completed"] = h->stats.completed;
    out["closures_retried"] = h->stats.retried;
    out["workers_lost"] = h->stats.workers_lost;
    out.update(troupe::examples::replication_json(ps_replicas, &h->stats));
  }
  std::cout << troupe::core::json_text(out) << std::endl;
  return 0;
}
