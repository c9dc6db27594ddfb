// The troupe command line.
//   troupe serve      run this process's task from TF_CONFIG until told to shut down
//   troupe launch     start a local cluster running a program in every task
//   troupe export     a servable CTR model from a job's PS snapshots or live PS tasks
//   troupe predict    score data with an exported model
//   troupe train      train a Keras model file, in one process or as every task of a job
// Its last line of output is one JSON object.
#include <unistd.h>

#include <iostream>
#include <map>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "actors/serve.hpp"
#include "core/json_text.hpp"
#include "examples/command_line.hpp"
#include "tools/launch.hpp"
#include "tools/model_tools.hpp"
#include "tools/train.hpp"
#include "troupe/registry.hpp"

namespace {

int finish(nlohmann::json result, int code) {
  std::cout << troupe::core::json_text(result) << std::endl;
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Troupe: fault-tolerant distributed training"};
  app.require_subcommand(1);
  auto* serve = app.add_subcommand("serve", "serve this process's task (from TF_CONFIG)");
  int heartbeat_ms = 100, timeout_ms = 1000;
  serve->add_option("--heartbeat-ms", heartbeat_ms)->check(CLI::PositiveNumber);
  serve->add_option("--connection-timeout-ms", timeout_ms)->check(CLI::PositiveNumber);
  bool tensor_channel = true;
  serve->add_flag("--tensor-channel,!--no-tensor-channel", tensor_channel,
                  "serve tensors through the tensor channel (default) or only as CAF messages");
  std::string snapshot_dir;
  int64_t snapshot_interval_ms = 1000;
  serve->add_option("--ps-snapshot-dir", snapshot_dir,
                    "snapshot this PS task's shards into DIR/ps-N, and restore from there on "
                    "start");
  serve->add_option("--ps-snapshot-interval-ms", snapshot_interval_ms)->check(CLI::PositiveNumber);
  int snapshot_full_every = 1;
  serve
      ->add_option("--ps-snapshot-full-every", snapshot_full_every,
                   "one snapshot in N is full, the others deltas of the dynamic tables' "
                   "changed rows (1: every one full)")
      ->check(CLI::Range(1, 1 << 20));
  auto* exporter = app.add_subcommand(
      "export", "write a servable CTR model from a job's PS snapshots or its live PS tasks");
  troupe::tools::ExportOptions eo;
  auto* from_snapshots = exporter->add_option(
      "--checkpoint", eo.checkpoint,
      "the job's --ps-snapshot-dir (ctr_model.json and a ps-N folder a PS task)");
  exporter
      ->add_option("--job", eo.job,
                   "or a running job's run directory (troupe launch --run-dir): its PS tasks "
                   "are read live, with its cluster-secret")
      ->excludes(from_snapshots);
  exporter->add_option("--config", eo.config,
                       "the model's ctr_model.json (default: the one in --checkpoint or --job)");
  exporter
      ->add_option("--connect-timeout-ms", eo.connect_timeout_ms,
                   "--job: how long to keep trying each PS task")
      ->check(CLI::PositiveNumber);
  exporter
      ->add_option("--out", eo.out,
                   "the model file to write: a name ending in .keras gets the model as a Keras "
                   "file (a fixed table only), any other Troupe's export format")
      ->required();
  exporter->add_option("--table-variable", eo.table_variable);
  exporter
      ->add_option("--min-count", eo.min_count,
                   "dynamic table: only rows whose key occurred at least this often")
      ->check(CLI::NonNegativeNumber);
  exporter->add_flag("--bf16", eo.bf16, "the table's rows in bfloat16 (half the bytes)");
  auto* predict = app.add_subcommand("predict", "score data with an exported model");
  troupe::tools::PredictOptions po;
  predict->add_option("--model", po.model, "a file troupe export wrote, or a Keras model (.keras)")
      ->required();
  predict->add_option("--predictions", po.predictions,
                      "a Keras model: write every output's predictions here (JSON)");
  predict->add_option("--data", po.data, "a data file, or - (standard input) or a FIFO")
      ->required();
  predict->add_option("--format", po.format)
      ->check(CLI::IsMember({"criteo", "libsvm", "tfrecord", "csv", "idx"}));
  predict->add_option("--batch", po.batch)->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  predict
      ->add_option("--latency-samples", po.latency_samples,
                   "first score this many examples one at a time: latency p50/p99 at batch 1")
      ->check(CLI::NonNegativeNumber);
  auto* train = app.add_subcommand(
      "train", "train a Keras model file (.keras): in one process, or in every task of a job");
  troupe::tools::TrainOptions to;
  troupe::tools::add_train_options(*train, to);
  auto* launch = app.add_subcommand("launch", "run PROGRAM as a local cluster on this machine");
  troupe::tools::LaunchOptions lo;
  launch
      ->add_option("--ps", lo.ps,
                   "number of parameter-server tasks (0, the default: a cluster of workers "
                   "only, for MultiWorkerMirroredStrategy, worker 0 the chief)")
      ->check(CLI::NonNegativeNumber);
  launch->add_option("--workers", lo.workers, "number of worker tasks")
      ->check(CLI::NonNegativeNumber);
  launch->add_option("--host", lo.host,
                     "the host in every task's address: 127.0.0.1 (default), ::1, localhost...");
  launch->add_flag("--evaluator", lo.evaluator,
                   "add an evaluator task (it follows the chief's checkpoints; it gets "
                   "--evaluator-grace-ms after the chief to finish)");
  launch->add_option("--evaluator-grace-ms", lo.evaluator_grace_ms)->check(CLI::NonNegativeNumber);
  launch->add_flag("--tls", lo.tls,
                   "every TCP link of the job in TLS 1.3, keyed by the job's secret (sets "
                   "TROUPE_TLS=1 for each task)");
  launch->add_option("--run-dir", lo.run_dir,
                     "where tasks.json and the logs go (default: a new /tmp dir)");
  launch->add_option("--grace-ms", lo.grace_ms,
                     "how long other tasks may take to exit after the chief");
  const std::map<std::string, troupe::tools::RestartPolicy> policies{
      {"Never", troupe::tools::RestartPolicy::never},
      {"OnFailure", troupe::tools::RestartPolicy::on_failure},
      {"ExitCode", troupe::tools::RestartPolicy::exit_code}};
  launch
      ->add_option("--restart-policy", lo.restart_policy,
                   "which failed tasks start again on their address, as in TFJob: Never "
                   "(default); OnFailure (a worker, PS or evaluator killed or exiting "
                   "non-zero, the chief when killed by a signal); ExitCode (any task whose "
                   "status is retryable: 130, 137, 138, 143)")
      ->transform(CLI::CheckedTransformer(policies));
  bool restart_failed = false;
  launch->add_flag("--restart-failed", restart_failed, "the same as --restart-policy OnFailure");
  launch
      ->add_option("--max-restarts", lo.max_restarts,
                   "with a restart policy: restarts per task before a failure is final")
      ->check(CLI::NonNegativeNumber);
  std::vector<std::string> chaos_specs;
  launch->add_option("--chaos", chaos_specs,
                     "inject a failure: ACTION:TYPE:INDEX@TIME[+DURATION], e.g. kill:worker:1@5s, "
                     "stop:worker:0@3s+2s (repeatable)");
  launch->footer("Usage: troupe launch [OPTIONS] -- PROGRAM [ARGS...]");
  // Everything after the first `--` is the program's, untouched: CLI11 sees only what is
  // before it.
  int own_argc = argc;
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--") {
      lo.program.assign(argv + i + 1, argv + argc);
      own_argc = i;
      break;
    }
  if (auto end = troupe::examples::parse_command_line(app, own_argc, argv, "troupe")) return *end;

  if (launch->parsed()) {
    if (lo.program.empty())
      return finish({{"ok", false}, {"error", "troupe launch: no PROGRAM given"}}, 2);
    for (const auto& spec : chaos_specs) {
      auto e = troupe::tools::parse_chaos(spec);
      if (!e) return finish({{"ok", false}, {"error", e.error().to_string()}}, 2);
      lo.chaos.push_back(*e);
    }
    if (restart_failed) lo.restart_policy = troupe::tools::RestartPolicy::on_failure;
    int code = 1;
    auto result = troupe::tools::launch(lo, code);
    return finish(result, code);
  }

  if (train->parsed()) return troupe::tools::run_train(std::move(to));

  if (exporter->parsed()) {
    int code = 1;
    auto result = troupe::tools::run_export(eo, code);
    return finish(result, code);
  }
  if (predict->parsed()) {
    int code = 1;
    auto result = troupe::tools::run_predict(po, code);
    return finish(result, code);
  }

  if (serve->parsed()) {
    auto resolver = troupe::net::TFConfigClusterResolver::from_env();
    if (!resolver) return finish({{"ok", false}, {"error", resolver.error().to_string()}}, 2);
    std::cerr << "troupe serve: " << resolver->task().to_string() << " on "
              << resolver->cluster_spec().address(resolver->task()) << ", pid " << ::getpid()
              << std::endl;
    troupe::net::NodeOptions options;
    options.heartbeat_interval = std::chrono::milliseconds(heartbeat_ms);
    options.connection_timeout = std::chrono::milliseconds(timeout_ms);
    options.tensor_channel = tensor_channel;
    options.ps_snapshot_dir = snapshot_dir;
    options.ps_snapshot_interval = std::chrono::milliseconds(snapshot_interval_ms);
    options.ps_snapshot_full_every = snapshot_full_every;
    // `troupe serve` runs PS tasks; workers run inside the job's own binary, which knows its
    // steps. An empty registry serves a worker that knows no steps.
    static const troupe::Registry empty;
    auto st = troupe::actors::serve(*resolver, empty, options, [&](const std::string& address) {
      std::cerr << "troupe serve: ready " << resolver->task().to_string() << " on " << address
                << std::endl;
    });
    if (!st) return finish({{"ok", false}, {"error", st.error().to_string()}}, 1);
    return finish({{"ok", true}, {"task", resolver->task().to_string()}}, 0);
  }
  return 0;
}
