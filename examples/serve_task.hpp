#pragma once

// Serving a PS or worker task, and running the evaluator task, the same in every
// distributed example.

#include "program.hpp"
#include "troupe/troupe.hpp"

namespace troupe::examples {

/// Serves this process's PS or worker task until the chief shuts the cluster down, then
/// prints {"ok": true, "task"}; returns the exit status.
inline int serve_task(const std::string& program, const net::TFConfigClusterResolver& resolver,
                      const Registry& registry, const net::NodeOptions& node = {}) {
  auto st = serve(resolver, registry, node);
  if (!st) return fail(program, st.error());
  std::cout << core::json_text(nlohmann::json{{"ok", true}, {"task", resolver.task().to_string()}})
            << std::endl;
  return 0;
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
                     {"last_step", r->last_step},
                     {"test_accuracy", r->last.accuracy()},
                     {"loss", r->last.loss()}};
  if (r->last.has_auc()) out["auc"] = r->last.auc();
  for (const auto& [k, v] : extra.items())
    out[k] = v;
  std::cout << core::json_text(out) << std::endl;
  return 0;
}

}  // namespace troupe::examples
