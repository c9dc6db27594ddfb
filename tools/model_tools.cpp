#include "tools/model_tools.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include "actors/ps_shard.hpp"
#include "core/data/guard.hpp"
#include "core/data/sparse_input.hpp"
#include "core/metrics.hpp"
#include "core/nn/ctr_export.hpp"
#include "core/nn/ctr_model.hpp"
#include "net/auth.hpp"
#include "net/cluster_spec.hpp"
#include "tools/chaos.hpp"
#include "tools/launch_plan.hpp"
#include "troupe/exit_codes.hpp"
#include "troupe/export.hpp"
#include "troupe/predictor.hpp"

namespace troupe::tools {

namespace {

using clock_type = std::chrono::steady_clock;

nlohmann::json failed(const std::string& program, const core::Error& e, int& code) {
  code = exit_permanent;
  return {{"ok", false}, {"program", program}, {"error", e.to_string()}};
}

// One shard of a variable as a PS snapshot holds it.
struct Piece {
  int64_t row_offset = 0;
  core::Tensor value;
  int64_t row_stride = 1;  // interleaved rows: the shard count
};

// Gathers the variables of every PS task's snapshot chain under `dir`: dense shards (and a
// fixed table's) as pieces by row offset; a dynamic table's rows (value columns only) and
// keys, keeping rows seen at least `min_count` times.
core::Status gather(const std::string& dir, const ExportOptions& o, int64_t width,
                    std::map<std::string, std::vector<Piece>>& pieces, core::CtrExport& out,
                    int& tasks) {
  std::vector<std::string> subdirs;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (it->is_directory() && it->path().filename().string().rfind("ps-", 0) == 0)
      subdirs.push_back(it->path().string());
  std::sort(subdirs.begin(), subdirs.end());
  if (subdirs.empty())
    return core::make_error(core::Errc::not_found, dir + ": no ps-<task> snapshot folder");
  std::vector<float> rows;
  for (const auto& sub : subdirs) {
    auto restored = actors::restore_ps_snapshots(sub);
    if (!restored) return restored.error();
    if (!*restored) return core::make_error(core::Errc::not_found, sub + ": no snapshot");
    ++tasks;
    const core::Checkpoint c = (*restored)->state->snapshot();
    for (const auto& [key, def] : c.ints) {
      const std::string suffix = "/def";
      if (key.size() <= suffix.size() || key.compare(key.size() - suffix.size(), 4, suffix) != 0)
        continue;
      const std::string var = key.substr(0, key.size() - suffix.size());
      const std::string name = var.substr(0, var.rfind('#'));
      auto value = c.tensors.find(var);
      if (value == c.tensors.end() || def.size() < 6)
        return core::make_error(core::Errc::data_loss, sub + ": " + var + " incomplete");
      if (c.ints.count(var + "/dynamic") != 0) {
        if (name != o.table_variable) continue;
        const auto& keys = c.ints.at(var + "/keys");
        const auto& meta = c.ints.at(var + "/row_meta");
        const int64_t stride = value->second.shape()[1];
        for (size_t i = 0; i < keys.size(); ++i) {
          if (meta[2 * i] < o.min_count) continue;
          out.keys.push_back(keys[i]);
          const float* r = value->second.data() + static_cast<int64_t>(i) * stride;
          rows.insert(rows.end(), r, r + width);
        }
        continue;
      }
      auto stride = c.ints.find(var + "/row_stride");
      pieces[name].push_back(
          {def[1], value->second, stride == c.ints.end() ? 1 : stride->second.at(0)});
    }
  }
  if (out.config.dynamic) {
    out.rows = core::Tensor(core::Shape{static_cast<int64_t>(out.keys.size()), width});
    std::copy(rows.begin(), rows.end(), out.rows.data());
  }
  return {};
}

// A variable whole from its shards (split along the first dimension).
core::Expected<core::Tensor> assemble(const std::string& name, std::vector<Piece> pieces) {
  std::sort(pieces.begin(), pieces.end(),
            [](const Piece& a, const Piece& b) { return a.row_offset < b.row_offset; });
  core::Shape shape = pieces.front().value.shape();
  const bool interleaved = pieces.front().row_stride > 1;
  int64_t rows = 0;
  std::vector<core::ConstTensorView> views;
  for (size_t k = 0; k < pieces.size(); ++k) {
    const Piece& p = pieces[k];
    const bool follows = interleaved ? p.row_stride == static_cast<int64_t>(pieces.size()) &&
                                           p.row_offset == static_cast<int64_t>(k)
                                     : p.row_stride == 1 && p.row_offset == rows;
    if (!follows || p.value.shape().rank() != shape.rank())
      return core::make_error(core::Errc::data_loss,
                              "variable '" + name + "': its shards do not tile it");
    rows += p.value.shape()[0];
    views.push_back(p.value);
  }
  if (interleaved) return core::interleave_rows(views, "variable '" + name + "'");
  shape[0] = rows;
  core::Tensor out(shape);
  float* at = out.data();
  for (const auto& p : pieces)
    at = std::copy_n(p.value.data(), p.value.size(), at);
  return out;
}

// The model's shape: `o.config`, or the ctr_model.json that ctr_ps and ctr_fit write into
// the snapshot directory and the run directory.
core::Expected<core::CtrExportConfig> model_description(const ExportOptions& o) {
  const std::string path =
      !o.config.empty() ? o.config : (o.job.empty() ? o.checkpoint : o.job) + "/ctr_model.json";
  std::ifstream meta(path);
  if (!meta)
    return core::make_error(core::Errc::not_found,
                            path +
                                ": cannot open (ctr_ps writes it into --ps-snapshot-dir and, "
                                "under troupe launch, the run directory; or give --config)");
  const std::string text{std::istreambuf_iterator<char>(meta), std::istreambuf_iterator<char>()};
  auto config = core::parse_ctr_export_config(text);
  if (!config) return core::make_error(config.error().code, path + ": " + config.error().message);
  config->bf16 = o.bf16;
  return config;
}

// The cluster a run directory's tasks.json lists (troupe launch rewrites it on restarts),
// checked as a TF_CONFIG is.
core::Expected<net::ClusterSpec> job_cluster(const std::string& run_dir) {
  auto listing = read_task_listing(run_dir);
  if (!listing) return listing.error();
  const auto bad = [&](const std::string& what) {
    return core::make_error(core::Errc::invalid_argument, run_dir + "/tasks.json: " + what);
  };
  std::map<std::string, std::map<int, std::string>> jobs;
  for (const auto& t : *listing)
    jobs[t.id.type][t.id.index] = t.address;
  if (jobs["ps"].empty()) return bad("no ps task: not a parameter-server job");
  nlohmann::json cluster = nlohmann::json::object();
  for (const auto& [job, tasks] : jobs) {
    int next = 0;
    for (const auto& [index, address] : tasks) {
      if (index != next) return bad(job + ":" + std::to_string(next) + " is missing");
      cluster[job].push_back(address);
      ++next;
    }
  }
  const nlohmann::json tf_config{{"cluster", cluster}, {"task", {{"type", "ps"}, {"index", 0}}}};
  auto resolver = net::TFConfigClusterResolver::parse(tf_config.dump());
  if (!resolver) return bad(resolver.error().message);
  return resolver->cluster_spec();
}

// Reads the model from the job's live PS tasks and writes it; fills the JSON's figures.
core::Status export_live(const ExportOptions& o, nlohmann::json& figures) {
  auto spec = job_cluster(o.job);  // first: a directory that is no job's is named as such
  if (!spec) return spec.error();
  auto described = model_description(o);
  if (!described) return described.error();
  const core::CtrExportConfig& config = *described;
  const std::string secret_file = o.job + "/cluster-secret";
  std::error_code ec;
  if (std::getenv(net::cluster_secret_env) == nullptr &&
      std::getenv(net::cluster_secret_file_env) == nullptr &&
      std::filesystem::exists(secret_file, ec)) {
    // Trusted as launch trusts it: this user's private directory and file, nobody else's.
    if (auto st = guard_run_dir(o.job, /*tighten=*/false); !st) return st;
    if (auto st = guard_secret_file(secret_file); !st) return st;
    ::setenv(net::cluster_secret_file_env, secret_file.c_str(), 1);
  }
  net::SimpleClusterResolver resolver(*spec, net::TaskId{"ps", 0});
  StrategyOptions so;
  so.connect_timeout = std::chrono::milliseconds(o.connect_timeout_ms);
  auto strategy = ParameterServerStrategy::make(resolver, nullptr, so);
  if (!strategy) return strategy.error();
  auto variables = (*strategy)->find_variables();
  if (!variables) return variables.error();
  // The model's own parameters: a job may keep other variables on its PS tasks.
  std::set<std::string> parameters;
  for (const auto& v : core::ctr_dense_variables(config.model))
    parameters.insert(v.first);
  std::optional<Variable> table;
  std::vector<Variable> dense;
  for (const auto& v : *variables) {
    if (v.name == o.table_variable)
      table = v;
    else if (parameters.count(v.name) != 0)
      dense.push_back(v);
  }
  if (!table)
    return core::make_error(core::Errc::not_found, "the job's PS tasks hold no variable '" +
                                                       o.table_variable + "' (--table-variable)");
  auto before = (*strategy)->ps_stats();
  if (!before) return before.error();
  auto r =
      export_ctr_model(**strategy, config, dense, *table, o.out, static_cast<int32_t>(o.min_count));
  if (!r) return r.error();
  auto after = (*strategy)->ps_stats();
  if (!after) return after.error();
  int64_t updates_before = 0, updates_after = 0, shards = 0;
  for (const auto& p : *before)
    updates_before += p.updates_applied;
  for (const auto& p : *after) {
    updates_after += p.updates_applied;
    shards += p.variables;
  }
  figures["table"] = config.dynamic ? "dynamic" : "fixed";
  figures["ps_tasks"] = spec->num_tasks("ps");
  figures["shards"] = shards;
  figures["rows"] = r->rows;
  // Pushes the PS tasks applied while the model was read: 0 means one instant's model.
  figures["updates_applied"] = updates_after;
  figures["updates_during_read"] = updates_after - updates_before;
  return {};
}

}  // namespace

nlohmann::json run_export(const ExportOptions& o, int& code) {
  const char* program = "troupe export";
  const auto t0 = clock_type::now();
  if (o.job.empty() == o.checkpoint.empty())
    return failed(program,
                  core::make_error(core::Errc::invalid_argument,
                                   "give either --checkpoint (PS snapshots) or --job (a running "
                                   "job's run directory)"),
                  code);
  if (o.min_count < 0 || o.min_count > std::numeric_limits<int32_t>::max())
    return failed(program,
                  core::make_error(core::Errc::invalid_argument, "--min-count out of range"), code);
  if (!o.job.empty()) {
    nlohmann::json figures;
    if (auto st = export_live(o, figures); !st) return failed(program, st.error(), code);
    std::error_code ec;
    code = 0;
    nlohmann::json out{
        {"ok", true}, {"program", program}, {"out", o.out}, {"source", "live"}, {"job", o.job}};
    out.update(figures);
    out.update({{"min_count", o.min_count},
                {"rows_dtype", o.bf16 ? "bfloat16" : "float32"},
                {"bytes", static_cast<int64_t>(std::filesystem::file_size(o.out, ec))},
                {"seconds", std::chrono::duration<double>(clock_type::now() - t0).count()}});
    return out;
  }
  auto config = model_description(o);
  if (!config) return failed(program, config.error(), code);
  core::CtrExport model;
  model.config = *config;
  std::map<std::string, std::vector<Piece>> pieces;
  int tasks = 0;
  if (auto st = gather(o.checkpoint, o, model.config.model.row_width(), pieces, model, tasks); !st)
    return failed(program, st.error(), code);
  for (auto& [name, parts] : pieces) {
    auto whole = assemble(name, std::move(parts));
    if (!whole) return failed(program, whole.error(), code);
    if (name == o.table_variable)
      model.rows = std::move(*whole);
    else
      model.dense.emplace(name, std::move(*whole));
  }
  if (auto st = write_exported_model(o.out, model); !st) return failed(program, st.error(), code);
  std::error_code ec;
  code = 0;
  return {{"ok", true},
          {"program", program},
          {"out", o.out},
          {"source", "snapshots"},
          {"ps_tasks", tasks},
          {"table", model.config.dynamic ? "dynamic" : "fixed"},
          {"rows", model.rows.shape()[0]},
          {"min_count", o.min_count},
          {"rows_dtype", o.bf16 ? "bfloat16" : "float32"},
          {"bytes", static_cast<int64_t>(std::filesystem::file_size(o.out, ec))},
          {"seconds", std::chrono::duration<double>(clock_type::now() - t0).count()}};
}

nlohmann::json run_predict(const PredictOptions& o, int& code) {
  const char* program = "troupe predict";
  if (is_keras_model(o.model)) return run_keras_predict(o, code);
  auto predictor = Predictor::load(o.model);
  if (!predictor) return failed(program, predictor.error(), code);
  auto format = core::parse_sparse_format(o.format.empty() ? "criteo" : o.format);
  if (!format) return failed(program, format.error(), code);
  core::SparseInputOptions in;
  in.format = *format;
  in.criteo = predictor->criteo_options();
  in.batch = static_cast<size_t>(o.batch);
  in.drop_remainder = false;
  in.epochs = 1;
  core::AUC auc(10000);
  core::Mean logloss;
  int64_t examples = 0;
  std::vector<double> latency_us;
  double predict_s = 0;
  auto status = core::guard_user_data("data", [&] {
    if (o.latency_samples > 0) {
      // Batch 1, one example at a time, from the start of the data (read separately).
      auto one = in;
      one.batch = 1;
      one.prefetch = 0;
      auto it = core::sparse_input({o.data}, core::InputContext{}, one).make_iterator();
      for (int64_t i = 0; i < o.latency_samples; ++i) {
        auto b = it->next();
        if (!b) break;
        const auto t = clock_type::now();
        predictor->predict(*b).value();
        latency_us.push_back(
            std::chrono::duration<double, std::micro>(clock_type::now() - t).count());
      }
    }
    auto it = core::sparse_input({o.data}, core::InputContext{}, in).make_iterator();
    while (auto b = it->next()) {
      const auto t = clock_type::now();
      auto p = predictor->predict(*b).value();
      predict_s += std::chrono::duration<double>(clock_type::now() - t).count();
      for (int64_t i = 0; i < b->size(); ++i) {
        const double y = b->labels[static_cast<size_t>(i)];
        const double q = std::clamp<double>(p[static_cast<size_t>(i)], 1e-7, 1 - 1e-7);
        logloss.update(-(y * std::log(q) + (1 - y) * std::log(1 - q)));
      }
      auc.update(core::ConstTensorView(p.data(), core::Shape{b->size()}), b->labels.data());
      examples += b->size();
    }
  });
  if (!status) return failed(program, status.error(), code);
  auto percentile = [&](double q) {
    if (latency_us.empty()) return nlohmann::json();
    auto v = latency_us;
    const auto k = static_cast<size_t>(q * static_cast<double>(v.size() - 1));
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
    return nlohmann::json(v[k]);
  };
  code = 0;
  return {{"ok", true},
          {"program", program},
          {"model", o.model},
          {"data", o.data},
          {"table", predictor->config().dynamic ? "dynamic" : "fixed"},
          {"rows", predictor->rows()},
          {"table_bytes", predictor->table_bytes()},
          {"examples", examples},
          {"auc", examples > 0 ? nlohmann::json(auc.result()) : nlohmann::json()},
          {"logloss", examples > 0 ? nlohmann::json(logloss.result()) : nlohmann::json()},
          {"batch", o.batch},
          {"examples_per_sec", predict_s > 0 ? static_cast<double>(examples) / predict_s : 0.0},
          {"latency_samples", static_cast<int64_t>(latency_us.size())},
          {"latency_us_p50", percentile(0.5)},
          {"latency_us_p99", percentile(0.99)}};
}

}  // namespace troupe::tools
