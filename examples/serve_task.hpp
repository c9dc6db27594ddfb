#pragma once

// Serving a PS or worker task, and running the evaluator task, the same in every
// distributed example.

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "program.hpp"
#include "troupe/troupe.hpp"

namespace troupe::examples {

/// Serves this process's PS or worker task until the chief shuts the cluster down, then
/// prints {"ok": true, "task"}; returns the exit status.
/// A cluster without a chief is refused at once: nothing would ever hand the task work.
inline int serve_task(const std::string& program, const net::TFConfigClusterResolver& resolver,
                      const Registry& registry, const net::NodeOptions& node = {}) {
  if (resolver.cluster_spec().num_tasks("chief") == 0)
    return fail(program,
                core::make_error(core::Errc::invalid_argument,
                                 "task " + resolver.task().to_string() +
                                     ": TF_CONFIG's cluster has no chief task, and " + program +
                                     " trains with ParameterServerStrategy, whose chief gives "
                                     "every PS and worker task its work (troupe launch adds "
                                     "the chief with --ps N)"));
  auto st = serve(resolver, registry, node);
  if (!st) return fail(program, st.error());
  std::cout << core::json_text(nlohmann::json{{"ok", true}, {"task", resolver.task().to_string()}})
            << std::endl;
  return 0;
}

/// --ps-replicas, the same on every PS program: copies of each shard (StrategyOptions).
inline void add_ps_replicas_flag(CLI::App& app, int& replicas) {
  app.add_option("--ps-replicas", replicas,
                 "copies of every variable shard, each on another PS task: a lost PS task's "
                 "shards fail over to a copy at once and nothing is lost (1: one copy, restore "
                 "from --ps-snapshot-dir)")
      ->check(CLI::Range(1, 64));
}

/// --shard-rows, the same on every PS program: how a partitioned variable's rows are dealt
/// to its shards (StrategyOptions::row_layout).
inline void add_shard_rows_flag(CLI::App& app, core::RowLayout& layout) {
  app.add_option("--shard-rows", layout,
                 "how a table's rows are dealt to its shards: range (runs of rows, as "
                 "TensorFlow does) or interleaved (row r on shard r % shards: spreads the hot "
                 "rows of ids ranked by frequency over every PS task)")
      ->transform(CLI::CheckedTransformer(
          std::map<std::string, core::RowLayout>{{"range", core::RowLayout::range},
                                                 {"interleaved", core::RowLayout::interleaved}},
          CLI::ignore_case));
}

/// A PS job's replication figures and worker losses for its final JSON line (`stats` null: no
/// coordinator).
inline nlohmann::json replication_json(int replicas, const CoordinatorStats* stats) {
  const CoordinatorStats none;
  const CoordinatorStats& s = stats != nullptr ? *stats : none;
  // When the chief saw each worker lost (set against a kill's time: bench/kill_detection.sh).
  nlohmann::json losses = nlohmann::json::array();
  for (const auto& l : s.worker_losses)
    losses.push_back({{"worker", l.worker}, {"unix_ms", l.unix_ms}});
  return nlohmann::json{{"ps_replicas", replicas},
                        {"ps_failovers", s.ps_failovers},
                        {"replicas_rebuilt", s.replicas_rebuilt},
                        {"under_replicated_shards", s.under_replicated_shards},
                        {"longest_stall_ms", s.longest_stall_ms},
                        {"updates_lost", s.updates_lost},
                        {"worker_losses", losses}};
}

/// The load the workers put on each PS task (`ps_load`: rows and value bytes pulled and
/// pushed, one entry per task) and its balance (`ps_load_balance`: the busiest task's rows
/// over the mean, 1 when even; null without load). A lost task (failed over) counts as none.
inline nlohmann::json ps_load_json(const std::vector<PsTaskStats>& tasks) {
  nlohmann::json per = nlohmann::json::array();
  int64_t most = 0, total = 0;
  for (const auto& p : tasks) {
    per.push_back({{"rows_pulled", p.rows_pulled},
                   {"rows_pushed", p.rows_pushed},
                   {"bytes_pulled", p.bytes_pulled},
                   {"bytes_pushed", p.bytes_pushed},
                   {"lost", p.lost}});
    const int64_t rows = p.rows_pulled + p.rows_pushed;
    most = std::max(most, rows);
    total += rows;
  }
  nlohmann::json balance;  // null
  if (total > 0)
    balance =
        static_cast<double>(most) * static_cast<double>(tasks.size()) / static_cast<double>(total);
  return nlohmann::json{{"ps_load", per}, {"ps_load_balance", balance}};
}

/// The evaluator task: follows `<model_dir>/ckpt`, evaluates each new checkpoint of a model
/// made from `spec` (one JSON line each), then prints a summary line with `extra`'s fields
/// added; returns the exit status.
inline int run_evaluator_task(const std::string& program, const ModelSpec& spec,
                              const std::string& model_dir, int64_t idle_timeout_s,
                              const nlohmann::json& extra = nlohmann::json::object()) {
  Model model(spec);
  SidecarEvaluatorOptions o;
  o.checkpoint_dir = model_dir + "/ckpt";
  o.logdir = model_dir + "/logs";
  o.idle_timeout = std::chrono::seconds(idle_timeout_s);
  auto r = run_sidecar_evaluator(model, o, std::cout);
  if (!r) return fail(program, r.error());
  nlohmann::json out{{"ok", true},
                     {"program", program},
                     {"task", "evaluator"},
                     {"evaluations", r->evaluations},
                     {"skipped", r->skipped},
                     {"last_step", r->last_step}};
  for (const auto& [k, v] : r->last_logs)  // the model's History names
    out[k] = v;
  for (const auto& [k, v] : extra.items())
    out[k] = v;
  std::cout << core::json_text(out) << std::endl;
  return 0;
}

}  // namespace troupe::examples
