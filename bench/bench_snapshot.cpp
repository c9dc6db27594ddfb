// Delta snapshots of a dynamic embedding table against full ones, and the table's memory
// per row, on one PS task's state (actors::PsShardState, as the ps_shard actor drives it):
//
//   build/bin/bench_snapshot --rows 10000000 --touched 0.01 --rounds 3
//
// Fills a table of `rows` rows (width 16, Adagrad: value and slot a row), then per round:
// a full snapshot (copy of the shard as the actor makes it, then the file written), `touched`
// of the rows updated, a delta snapshot (copy and file). One JSON line per snapshot, then
// the medians: delta over full in bytes and in time (copy + write), and the resident memory
// the table added per row over its payload (key + value + slot).
#include <chrono>
#include <filesystem>
#include <iostream>
#include <random>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "actors/ps_shard_state.hpp"
#include "bench_stats.hpp"
#include "core/checkpoint/checkpoint.hpp"
#include "core/json_text.hpp"
#include "examples/command_line.hpp"

using troupe::bench::clock_type;
using troupe::bench::seconds_since;
namespace tc = troupe::core;

namespace {

struct Taken {
  double copy_s = 0, write_s = 0;
  int64_t bytes = 0, rows = 0;
};

// One snapshot as the actor takes it: each shard copied (then its delta restarted), the
// counters, the file written and synced.
tc::Expected<Taken> snapshot(troupe::actors::PsShardState& ps, bool delta,
                             const std::string& path) {
  Taken t;
  tc::Checkpoint c;
  const auto t0 = clock_type::now();
  for (const auto& name : ps.shard_names()) {
    if (delta)
      ps.snapshot_shard_delta(name, c);
    else
      ps.snapshot_shard(name, c);
    ps.mark_copied(name);
  }
  ps.snapshot_counters(c);
  if (delta) c.ints["delta"] = {0, 1};
  t.copy_s = seconds_since(t0);
  for (const auto& [name, tensor] : c.tensors)
    t.rows += tensor.shape()[0];
  const auto t1 = clock_type::now();
  if (auto st = tc::write_checkpoint(path, c); !st) return st.error();
  t.write_s = seconds_since(t1);
  t.bytes = static_cast<int64_t>(std::filesystem::file_size(path));
  std::filesystem::remove(path);
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Delta against full PS snapshots of a dynamic table"};
  int64_t rows = 10000000;
  double touched = 0.01;
  int rounds = 3;
  std::string dir = std::filesystem::temp_directory_path().string();
  app.add_option("--rows", rows)->check(CLI::Range(int64_t{1000}, int64_t{1} << 30));
  app.add_option("--touched", touched, "fraction of the rows updated between snapshots")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--rounds", rounds)->check(CLI::Range(1, 100));
  app.add_option("--dir", dir, "where the snapshot files are written (and removed)");
  if (auto end = troupe::examples::parse_command_line(app, argc, argv, "bench_snapshot"))
    return *end;

  const int64_t width = 16;
  const double rss0 = troupe::bench::rss_mib();
  troupe::actors::PsShardState ps;
  ps.track_deltas(true);
  troupe::net::VariableDef def;
  def.name = "ids";
  def.shape = {rows, width};
  def.dynamic = true;
  def.optimizer = "adagrad";
  def.learning_rate = 0.05f;
  def.init_kind = static_cast<int32_t>(tc::Initializer::Kind::random_uniform);
  def.init_value = 0.05f;
  if (auto st = ps.create(def); !st) return troupe::examples::fail("bench_snapshot", st.error());
  // Keys spread over 64 bits, as hashed raw ids are.
  auto key_of = [](int64_t i) {
    return static_cast<int64_t>(static_cast<uint64_t>(i + 1) * 0x9E3779B97F4A7C15ull);
  };
  uint64_t closure = 1;
  const int64_t batch = 65536;
  auto push = [&](const std::vector<int64_t>& keys) {
    const auto n = static_cast<int64_t>(keys.size());
    troupe::net::WireTensor g{{n, width},
                              std::vector<float>(static_cast<size_t>(n * width), 0.01f)};
    ps.push_rows(closure++, "ids#0", {keys, std::move(g)}).value();
  };
  const auto t_fill = clock_type::now();
  std::vector<int64_t> keys;
  for (int64_t i = 0; i < rows; ++i) {
    keys.push_back(key_of(i));
    if (static_cast<int64_t>(keys.size()) == batch || i + 1 == rows) {
      push(keys);
      keys.clear();
    }
  }
  const double fill_s = seconds_since(t_fill);
  const double rss_table = troupe::bench::rss_mib() - rss0;
  // Payload a row: its key, its value and its Adagrad slot.
  const double payload = static_cast<double>(rows) * (8 + 2 * width * 4) / (1 << 20);
  std::cout << tc::json_text(nlohmann::json{{"bench", "table_memory"},
                                            {"rows", ps.table_totals().rows},
                                            {"fill_s", fill_s},
                                            {"rss_mib", rss_table},
                                            {"payload_mib", payload},
                                            {"rss_over_payload", rss_table / payload},
                                            {"memory_bytes", ps.table_totals().bytes}})
            << std::endl;

  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int64_t> pick(0, rows - 1);
  const auto touch = static_cast<int64_t>(touched * static_cast<double>(rows));
  std::vector<double> bytes_ratio, time_ratio;
  const std::string path = dir + "/troupe-bench-snapshot-" + std::to_string(::getpid()) + ".tckpt";
  for (int r = 0; r < rounds; ++r) {
    auto taken_full = snapshot(ps, false, path);
    if (!taken_full) return troupe::examples::fail("bench_snapshot", taken_full.error());
    const Taken full = *taken_full;
    for (int64_t done = 0; done < touch;) {
      keys.clear();
      for (; done < touch && static_cast<int64_t>(keys.size()) < batch; ++done)
        keys.push_back(key_of(pick(rng)));
      std::sort(keys.begin(), keys.end());
      keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
      push(keys);
    }
    auto taken_delta = snapshot(ps, true, path);
    if (!taken_delta) return troupe::examples::fail("bench_snapshot", taken_delta.error());
    const Taken delta = *taken_delta;
    for (const auto* t : {&full, &delta})
      std::cout << tc::json_text(
                       nlohmann::json{{"bench", t == &full ? "snapshot_full" : "snapshot_delta"},
                                      {"round", r},
                                      {"rows_written", t->rows},
                                      {"bytes", t->bytes},
                                      {"copy_s", t->copy_s},
                                      {"write_s", t->write_s}})
                << std::endl;
    bytes_ratio.push_back(static_cast<double>(delta.bytes) / static_cast<double>(full.bytes));
    time_ratio.push_back((delta.copy_s + delta.write_s) / (full.copy_s + full.write_s));
  }
  std::cout << tc::json_text(
                   nlohmann::json{{"ok", true},
                                  {"program", "bench_snapshot"},
                                  {"rows", rows},
                                  {"width", width},
                                  {"touched", touched},
                                  {"rounds", rounds},
                                  {"delta_over_full_bytes", troupe::bench::median(bytes_ratio)},
                                  {"delta_over_full_time", troupe::bench::median(time_ratio)},
                                  {"rss_over_payload", rss_table / payload}})
            << std::endl;
  return 0;
}
