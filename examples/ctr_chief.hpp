#pragma once

// The chief's side of ctr_ps besides scheduling: the PS tasks' memory sampled over the run,
// and the model exported from the live PS tasks every so often while it trains.
#include <chrono>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "troupe/export.hpp"
#include "troupe/strategy.hpp"

namespace troupe::examples {

// The PS tasks' memory and rows over the run, sampled every `interval` by the chief: at most
// 256 samples, the interval doubling (every other sample dropped) when they would be more.
class MemoryTimeline {
 public:
  explicit MemoryTimeline(std::chrono::milliseconds interval) : interval_(interval) {}
  void maybe_sample(ParameterServerStrategy& strategy, std::chrono::steady_clock::time_point t0) {
    const auto now = std::chrono::steady_clock::now();
    if (interval_.count() <= 0 || now < next_) return;
    next_ = now + interval_;
    auto stats = strategy.ps_stats();
    if (!stats) return;  // a PS being restored: the next sample will tell
    nlohmann::json rss = nlohmann::json::array();
    int64_t rows = 0;
    for (const auto& p : *stats) {
      rss.push_back(p.rss_bytes);
      rows += p.table_rows;
    }
    samples_.push_back({{"t_s", std::chrono::duration<double>(now - t0).count()},
                        {"ps_rss_bytes", rss},
                        {"table_rows", rows}});
    if (samples_.size() > 256) {
      std::vector<nlohmann::json> kept;
      for (size_t i = 0; i < samples_.size(); i += 2)
        kept.push_back(std::move(samples_[i]));
      samples_ = std::move(kept);
      interval_ *= 2;
    }
  }
  nlohmann::json json() const { return samples_; }

 private:
  std::chrono::milliseconds interval_;
  std::chrono::steady_clock::time_point next_{};
  std::vector<nlohmann::json> samples_;
};

// Exports of the model to one file from the live PS tasks (troupe::export_ctr_model): every
// `every_s` seconds or `every_steps` closures scheduled during training, whichever comes
// first (0: not by that measure), and once at the end. A failed export during training is
// counted and told on stderr, and training goes on (the file keeps the previous export).
class PeriodicExport {
 public:
  struct Options {
    std::string path;  // empty: no exports
    double every_s = 0;
    int64_t every_steps = 0;
    int32_t min_count = 0;
  };
  PeriodicExport(Options o, core::CtrExportConfig config, std::vector<Variable> dense,
                 Variable table)
      : o_(std::move(o)),
        config_(std::move(config)),
        dense_(std::move(dense)),
        table_(std::move(table)) {}

  bool enabled() const { return !o_.path.empty(); }
  /// Between two closures scheduled, `scheduled` so far: exports when one is due.
  void maybe(ParameterServerStrategy& strategy, int64_t scheduled) {
    if (!enabled() || (o_.every_s <= 0 && o_.every_steps <= 0)) return;
    const auto now = std::chrono::steady_clock::now();
    if (!started_) {
      started_ = true;
      last_time_ = now;
    }
    const bool by_time =
        o_.every_s > 0 && std::chrono::duration<double>(now - last_time_).count() >= o_.every_s;
    const bool by_steps = o_.every_steps > 0 && scheduled - last_steps_ >= o_.every_steps;
    if (!by_time && !by_steps) return;
    last_time_ = now;
    last_steps_ = scheduled;
    if (auto st = run(strategy); !st) {
      ++failures_;
      std::cerr << "ctr_ps: export during training failed: " << st.error().to_string() << std::endl;
    }
  }
  /// The export at the end (after join()): the trained model exactly.
  core::Status last(ParameterServerStrategy& strategy) {
    if (!enabled()) return {};
    auto st = run(strategy);
    final_ = st.ok();
    return st;
  }
  nlohmann::json json() const {
    if (!enabled()) return nullptr;
    return {{"path", o_.path},
            {"exports", exports_},
            {"during_training", exports_ - (final_ ? 1 : 0)},
            {"failures", failures_},
            {"rows", report_.rows},
            {"bytes", report_.bytes},
            {"seconds_max", seconds_max_},
            {"final", final_}};
  }

 private:
  core::Status run(ParameterServerStrategy& strategy) {
    auto r = export_ctr_model(strategy, config_, dense_, table_, o_.path, o_.min_count);
    if (!r) return r.error();
    report_ = *r;
    ++exports_;
    seconds_max_ = std::max(seconds_max_, r->seconds);
    return {};
  }

  Options o_;
  core::CtrExportConfig config_;
  std::vector<Variable> dense_;
  Variable table_;
  bool started_ = false, final_ = false;
  std::chrono::steady_clock::time_point last_time_{};
  int64_t last_steps_ = 0, exports_ = 0, failures_ = 0;
  double seconds_max_ = 0;
  ExportReport report_;
};

}  // namespace troupe::examples
