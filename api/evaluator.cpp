#include "troupe/evaluator.hpp"

#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "api/model_state.hpp"
#include "core/checkpoint/checkpoint_manager.hpp"
#include "core/json_text.hpp"
#include "core/summary/event_writer.hpp"
#include "troupe/callbacks.hpp"

namespace troupe {

using core::Errc;
using core::make_error;

namespace {

// The step the chief's final marker names, if the marker is there and readable.
std::optional<int64_t> final_step(const std::string& dir) {
  std::ifstream in(dir + "/" + callbacks::final_marker);
  if (!in) return std::nullopt;
  auto j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.contains("step") || !j["step"].is_number_integer())
    return std::nullopt;
  return j["step"].get<int64_t>();
}

int64_t first_int(const core::Checkpoint& c, const char* key, int64_t fallback) {
  auto it = c.ints.find(key);
  return it == c.ints.end() || it->second.empty() ? fallback : it->second[0];
}

}  // namespace

core::Expected<SidecarResult> run_sidecar_evaluator(Model& model, const SidecarEvaluatorOptions& o,
                                                    std::ostream& out) {
  if (o.checkpoint_dir.empty())
    return make_error(Errc::invalid_argument, "sidecar evaluator: no checkpoint directory");
  if (model.strategy() != nullptr)
    return make_error(Errc::invalid_argument,
                      "sidecar evaluator: the model must not be attached to a strategy (the "
                      "evaluator never connects to the training cluster)");
  // Only lists and reads: max_to_keep 0 never deletes anything.
  const core::CheckpointManager checkpoints(o.checkpoint_dir, 0);
  std::optional<core::EventFileWriter> events;
  std::ofstream jsonl;
  if (!o.logdir.empty()) {
    events.emplace(o.logdir + "/eval");
    std::error_code ec;
    std::filesystem::create_directories(o.logdir + "/eval", ec);
    jsonl.open(o.logdir + "/eval/metrics.jsonl", std::ios::app);
  }

  SidecarResult r;
  std::set<std::string> unreadable;  // damaged files stay listed; try each once
  auto idle_since = std::chrono::steady_clock::now();
  for (;;) {
    // The newest checkpoint not evaluated yet (older ones are skipped, as TensorFlow's
    // evaluator does when the chief saves faster than it evaluates).
    std::optional<std::pair<int64_t, std::string>> next;
    for (const auto& c : checkpoints.checkpoints())
      if (c.first > r.last_step && unreadable.count(c.second) == 0) next = c;
    if (next) {
      const auto& [step, path] = *next;
      if (o.before_read) o.before_read(path);
      auto ckpt = core::read_checkpoint(path);
      if (!ckpt) {
        if (ckpt.error().code == Errc::not_found)
          std::cerr << "sidecar evaluator: checkpoint " << path
                    << " was deleted before it could be read; looking for a newer one" << std::endl;
        else
          std::cerr << "sidecar evaluator: skipping an unreadable checkpoint: "
                    << ckpt.error().to_string() << std::endl;
        unreadable.insert(path);
        ++r.skipped;
        continue;
      }
      if (auto st = model.set_weights(*ckpt); !st)
        return make_error(st.error().code, path + ": " + st.error().message);
      auto stats = model.evaluate();
      if (!stats) return stats.error();
      const int64_t ckpt_step = first_int(*ckpt, "step", step);
      const int64_t epoch = first_int(*ckpt, "epoch", -1);
      nlohmann::json line{{"checkpoint", path},
                          {"step", ckpt_step},
                          {"epoch", epoch},
                          {"examples", stats->examples}};
      // The model's compiled History names ("loss", "accuracy", "auc", "ctr_auc", ...).
      std::map<std::string, double> logs = detail::graph_logs(*model.state().replica.graph, *stats);
      std::vector<std::pair<std::string, double>> scalars;  // the loss first
      if (logs.count("loss") != 0) scalars.emplace_back("loss", logs.at("loss"));
      for (const auto& [k, v] : logs)
        if (k != "loss") scalars.emplace_back(k, v);
      for (const auto& [k, v] : logs)
        line[k] = v;
      out << core::json_text(line) << std::endl;
      if (events)
        for (const auto& [k, v] : scalars)
          if (auto st = events->add_scalar("evaluation_" + k + "_vs_iterations",
                                           static_cast<float>(v), ckpt_step);
              !st)
            return st.error();
      if (jsonl.is_open()) {
        nlohmann::json j = line;
        j["event"] = "evaluation";
        jsonl << core::json_text(j) << "\n" << std::flush;
      }
      ++r.evaluations;
      r.last_step = step;
      r.last = *stats;
      r.last_logs = std::move(logs);
      idle_since = std::chrono::steady_clock::now();
      if (o.max_evaluations > 0 && r.evaluations >= o.max_evaluations) return r;
      continue;
    }
    // Nothing new: done once the chief's final checkpoint has been evaluated (or, if that
    // one is gone, once the chief has finished and nothing newer is left).
    if (auto f = final_step(o.checkpoint_dir)) {
      if (r.last_step < *f)
        std::cerr << "sidecar evaluator: the final checkpoint (step " << *f
                  << ") could not be evaluated" << std::endl;
      return r;
    }
    if (o.stop && o.stop())
      return make_error(Errc::cancelled,
                        "sidecar evaluator: stopped while waiting for a "
                        "checkpoint in " +
                            o.checkpoint_dir);
    if (std::chrono::steady_clock::now() - idle_since > o.idle_timeout)
      return make_error(Errc::unavailable, "sidecar evaluator: no new checkpoint in " +
                                               o.checkpoint_dir + " for " +
                                               std::to_string(o.idle_timeout.count()) + " ms");
    // Watching a directory another process writes: poll it.
    std::this_thread::sleep_for(o.poll_interval);
  }
}

}  // namespace troupe
