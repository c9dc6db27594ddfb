// Fashion-MNIST trained asynchronously with parameter servers, TensorFlow's
// ParameterServerStrategy + ClusterCoordinator in Troupe. The same binary runs every task:
//
//   build/bin/troupe launch --ps 2 --workers 2 -- build/bin/fmnist_ps
//
// Workers pull the MLP's variables from the PS tasks, compute gradients on their shard of
// the data, and push them back; each PS applies SGD as gradients arrive. The chief
// schedules the closures, evaluates the result on the 10k test images and prints one JSON
// line.
#include <chrono>
#include <iostream>
#include <memory>
#include <mutex>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "core/data/idx.hpp"
#include "core/json_text.hpp"
#include "core/keras/classifier_graph.hpp"
#include "core/keras/classifier_trainer.hpp"
#include "device_flags.hpp"
#include "examples/command_line.hpp"
#include "fmnist_data.hpp"
#include "net/slurm.hpp"
#include "net/tls.hpp"
#include "serve_task.hpp"
#include "troupe/troupe.hpp"

namespace tc = troupe::core;
using clock_type = std::chrono::steady_clock;

namespace {

struct Settings {
  std::string data_dir = tc::fashion_mnist_dir;
  int batch = 64;
  int steps_per_worker = 938;
  int steps_per_execution = 1;
  float lr = 0.1f;
  int shards = 0;  // 0: each variable whole on one PS (round-robin)
  uint64_t seed = 1;
  size_t shuffle_buffer = 10000;
  bool fused = true;                     // push gradients and get the new values in one round trip
  troupe::examples::DeviceFlags device;  // where the workers compute
  troupe::examples::WireFlag wire;
};

// The model replica of this process's worker (the MLP as its Keras form's layer graph);
// only the worker actor's thread uses it.
struct Replica {
  std::unique_ptr<tc::keras::ClassifierGraph> model = tc::keras::make_classifier("mlp", 1).value();
  std::vector<tc::Parameter> params = model->parameters();
  tc::SoftmaxCrossEntropy loss;
  std::vector<std::string> names;
  bool have_values = false;  // fused mode: the values the last push returned
  troupe::examples::WorkerDevice device;
  tc::Tensor input;  // the batch on the worker's device
  Replica() {
    for (auto& p : params)
      names.push_back(p.name);
  }
};

troupe::Registry make_registry(const Settings& s) {
  troupe::Registry r;
  r.add_dataset("fmnist_train", [s](const tc::InputContext& ctx) {
    return troupe::examples::fmnist_train_batches("fmnist_ps", s.data_dir, ctx, s.batch, s.seed,
                                                  s.shuffle_buffer);
  });
  auto replica = std::make_shared<Replica>();
  r.add_step(
      "train_step",
      [replica, s](troupe::StepContext& ctx, troupe::PerWorkerDataset ds) -> tc::Expected<float> {
        Replica& m = *replica;
        if (auto st =
                m.device.place(s.device, "fmnist_ps",
                               [&](tc::Device d, tc::Precision p) { return m.model->to(d, p); });
            !st)
          return st.error();
        auto batch = ctx.next_batch(ds);
        if (!batch) return batch.error();
        if (!*batch) return tc::make_error(tc::Errc::out_of_range, "the training data ended");
        auto values = ctx.pull(m.names);
        if (!values) return values.error();
        if (auto st = tc::assign(m.params, std::move(*values)); !st) return st.error();
        if (auto st = m.model->check_input((*batch)->features.shape()); !st) return st.error();
        m.loss.set_grad_scale(m.device.grad_scale());
        const auto x = tc::on(m.device.device(), (*batch)->features, m.input);
        auto loss = m.loss.forward(m.model->forward(x), (*batch)->classes.data());
        if (!loss) return loss.error();
        if (!std::isfinite(*loss))
          return tc::make_error(tc::Errc::invalid_argument, "loss is not finite");
        m.model->backward_parameters(m.loss.backward(), {});
        std::vector<tc::TensorView> grads;
        for (auto& p : m.params)
          grads.push_back(*p.grad);
        if (!m.device.finish_scaled_step(grads)) return *loss;  // float16 overflow: no push
        if (auto st = ctx.push(m.device.host_grads(m.params)); !st) return st.error();
        return *loss;
      });
  return r;
}

int fail(const troupe::core::Error& e) {
  return troupe::examples::fail("fmnist_ps", e);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Fashion-MNIST with parameter servers (run under troupe launch)"};
  Settings s;
  app.add_option("--data-dir", s.data_dir);
  app.add_option("--batch", s.batch, "batch per step")->check(CLI::PositiveNumber);
  app.add_option("--steps-per-worker", s.steps_per_worker)->check(CLI::PositiveNumber);
  app.add_option("--steps-per-execution", s.steps_per_execution, "steps packed in one closure")
      ->check(CLI::Range(1, 1000));
  app.add_option("--lr", s.lr);
  app.add_option("--shards", s.shards, "split each variable over this many shards (0: whole)");
  app.add_option("--seed", s.seed);
  app.add_option("--shuffle-buffer", s.shuffle_buffer, "examples in each worker's shuffle buffer")
      ->check(CLI::PositiveNumber);
  app.add_flag(
      "--fused,!--no-fused", s.fused,
      "push gradients and receive new values in one round trip (default) or pull, then push");
  std::string snapshot_dir;
  int64_t snapshot_interval_ms = 500;
  app.add_option("--ps-snapshot-dir", snapshot_dir,
                 "PS tasks snapshot into DIR/ps-N and a restarted PS restores from there; the "
                 "chief then waits for a failed PS instead of failing (use a fresh DIR per job)");
  app.add_option("--ps-snapshot-interval-ms", snapshot_interval_ms)->check(CLI::PositiveNumber);
  int64_t restore_deadline_ms = 30000;
  app.add_option("--ps-restore-deadline-ms", restore_deadline_ms,
                 "with --ps-snapshot-dir: how long the chief waits for a failed PS to come back")
      ->check(CLI::PositiveNumber);
  int64_t watchdog_ms = 30000;
  app.add_option("--watchdog-ms", watchdog_ms,
                 "report what is in flight where when no closure finished for this long (0: off)")
      ->check(CLI::NonNegativeNumber);
  std::string backup_dir;
  int64_t backup_every = 200;
  app.add_option("--backup-dir", backup_dir,
                 "the chief backs up variables, optimizer slots and its step counter here, and "
                 "a restarted chief resumes from the newest backup (removed when training ends)");
  app.add_option("--backup-every", backup_every, "closures between backups")
      ->check(CLI::PositiveNumber);
  int ps_replicas = 1;
  troupe::examples::add_ps_replicas_flag(app, ps_replicas);
  std::string transport = "channel";
  app.add_option("--tensor-transport", transport,
                 "how pulls and pushes travel: the tensor channel or CAF messages")
      ->check(CLI::IsMember({"channel", "caf"}));
  s.device.add(app);
  s.wire.add(app);
  if (auto end = troupe::examples::parse_command_line(app, argc, argv, "fmnist_ps")) return *end;
  if (auto st = troupe::examples::check_spelling(s.device); !st) return fail(st.error());
  const auto wire = s.wire.parse();
  if (!wire) return fail(wire.error());

  const auto registry = make_registry(s);
  troupe::net::NodeOptions node;
  node.tensor_channel = transport == "channel";
  node.wire_dtype = *wire;
  node.ps_snapshot_dir = snapshot_dir;
  node.ps_snapshot_interval = std::chrono::milliseconds(snapshot_interval_ms);
  auto resolver = troupe::net::TFConfigClusterResolver::from_env(troupe::net::default_ps_jobs);
  if (!resolver) return fail(resolver.error());
  if (resolver->task().type != "chief") {
    return troupe::examples::serve_task("fmnist_ps", *resolver, registry, node);
  }

  const auto t_start = clock_type::now();
  std::shared_ptr<const tc::Partitioner> partitioner;
  if (s.shards > 0) partitioner = std::make_shared<tc::FixedShardsPartitioner>(s.shards);
  troupe::StrategyOptions strategy_options;
  strategy_options.ps_replicas = ps_replicas;
  auto strategy = troupe::ParameterServerStrategy::make(*resolver, partitioner, strategy_options);
  if (!strategy) return fail(strategy.error());

  // The chief creates the variables with the model's own shapes and initial values' kind.
  Replica shapes;
  std::vector<troupe::Variable> vars;
  uint64_t seed = s.seed;
  for (auto& p : shapes.params) {
    const bool kernel = p.value->shape().rank() == 2;
    const tc::Initializer init{
        kernel ? tc::Initializer::Kind::glorot_uniform : tc::Initializer::Kind::zeros, 0.0f,
        seed++};
    auto v = (*strategy)->create_variable(p.name, p.value->shape(), init, "sgd", s.lr);
    if (!v) return fail(v.error());
    vars.push_back(*v);
  }
  troupe::CoordinatorOptions coord_options;
  // A restarted chief puts the last backup back on the PS tasks and resumes at its step.
  std::unique_ptr<troupe::BackupAndRestore> backup;
  troupe::TrainingState resumed;
  if (!backup_dir.empty()) {
    auto b = troupe::BackupAndRestore::make(**strategy, backup_dir);
    if (!b) return fail(b.error());
    backup = std::move(*b);
    auto at = backup->restore();
    if (!at) return fail(at.error());
    if (*at) {
      resumed = **at;
      std::cerr << "fmnist_ps: resumed from the backup at step " << resumed.step << std::endl;
    }
    coord_options.incarnation = backup->incarnation();
  }
  coord_options.ps_recovery = !snapshot_dir.empty();
  coord_options.ps_restore_deadline = std::chrono::milliseconds(restore_deadline_ms);
  coord_options.watchdog_timeout = std::chrono::milliseconds(watchdog_ms);
  auto coord = troupe::ClusterCoordinator::make(**strategy, coord_options);
  if (!coord) return fail(coord.error());
  auto ds = (*coord)->create_per_worker_dataset("fmnist_train");
  if (!ds) return fail(ds.error());

  const int workers = (*strategy)->num_workers();
  const int64_t total_steps = static_cast<int64_t>(s.steps_per_worker) * workers;
  const int64_t closures = (total_steps + s.steps_per_execution - 1) / s.steps_per_execution;
  const auto t0 = clock_type::now();
  std::vector<troupe::RemoteValue<float>> losses;
  const int64_t first = std::min(resumed.step, closures);
  const int64_t examples_per_closure = static_cast<int64_t>(s.steps_per_execution) * s.batch;
  int64_t backups = 0;
  tc::Status joined;
  for (int64_t i = first; i < closures && joined.ok(); ++i) {
    if (s.steps_per_execution == 1 && i % 100 == 99) {
      losses.push_back((*coord)->schedule<float>("train_step", *ds));
    } else {
      (*coord)->schedule_no_result("train_step", static_cast<uint32_t>(s.steps_per_execution), *ds);
    }
    if (backup && (i + 1) % backup_every == 0 && i + 1 < closures) {
      // Back up at a point where nothing is in flight: the variables then hold exactly
      // the first i + 1 closures' updates.
      joined = (*coord)->join();
      if (!joined.ok()) break;
      if (auto st = backup->backup({(i + 1) * examples_per_closure / 60000, i + 1}); !st)
        return fail(st.error());
      ++backups;
    }
  }
  if (joined.ok()) joined = (*coord)->join();
  const double train_s = std::chrono::duration<double>(clock_type::now() - t0).count();
  if (!joined) {
    (*coord)->shutdown_cluster();
    return fail(joined.error());
  }
  float last_loss = 0.0f;
  if (!losses.empty()) {
    auto l = losses.back().fetch();
    if (l) last_loss = *l;
  }

  // Evaluate the trained variables on the chief.
  Replica eval;
  for (size_t i = 0; i < vars.size(); ++i) {
    auto value = (*strategy)->read(vars[i]);
    if (!value) return fail(value.error());
    *eval.params[i].value = std::move(*value);
  }
  auto test = tc::load_fashion_mnist(s.data_dir, "t10k");
  if (!test) return fail(test.error());
  tc::SGD unused(0.0f);
  tc::keras::ClassifierTrainer evaluator(*eval.model, unused);
  tc::Accuracy accuracy;
  tc::Mean test_loss;
  auto it = tc::to_batches(tc::from_vector(std::move(*test)), 1000, false).make_iterator();
  while (auto b = it->next())
    if (auto st = evaluator.evaluate_batch(b->features, b->classes.data(), accuracy, test_loss);
        !st)
      return fail(st.error());

  if (backup)
    if (auto st = backup->finish(); !st) return fail(st.error());
  const auto stats = (*coord)->stats();
  const auto shutdown = (*coord)->shutdown_cluster();
  if (!shutdown) std::cerr << "fmnist_ps: " << shutdown.error().message << std::endl;
  const int64_t examples = (closures - first) * examples_per_closure;
  nlohmann::json out{
      {"ok", true},
      {"program", "fmnist_ps"},
      {"workers", workers},
      {"ps", (*strategy)->cluster_spec().num_tasks("ps")},
      {"batch", s.batch},
      {"steps", closures * s.steps_per_execution},
      {"steps_per_execution", s.steps_per_execution},
      {"fused", s.fused},
      {"tensor_transport", transport},
      {"examples", examples},
      {"examples_per_sec", examples / train_s},
      {"last_loss", last_loss},
      {"test_loss", test_loss.result()},
      {"test_accuracy", accuracy.result()},
      {"closures_scheduled", stats.scheduled},
      {"closures_completed", stats.completed},
      {"closures_retried", stats.retried},
      {"closures_cancelled", stats.cancelled},
      {"workers_lost", stats.workers_lost},
      {"shutdown_acknowledged", shutdown.ok()},
      {"tls", troupe::net::links_encrypted()},
      {"worker_rejoins", stats.worker_rejoins},
      {"ps_restores", stats.ps_restores},
      {"ps_reconnects", stats.ps_reconnects},
      {"watchdog_reports", stats.watchdog_reports},
      {"snapshot_failures", stats.snapshot_failures},
      {"snapshot_age_ms", stats.snapshot_age_ms},
      {"resumed_from_step", first},
      {"backups", backups},
      {"incarnation", (*coord)->incarnation()},
      {"worker_device", s.device.device},
      {"precision", s.device.precision},
      {"wire_dtype", troupe::net::wire_dtype_name(*wire)},
      {"cpu_features", troupe::core::cpu_feature_names()},
      {"train_s", train_s},
      {"wall_s", std::chrono::duration<double>(clock_type::now() - t_start).count()}};
  out.update(troupe::examples::replication_json(ps_replicas, &stats));
  std::cout << troupe::core::json_text(out) << std::endl;
  return 0;
}
