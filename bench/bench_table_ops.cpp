// A PS task's table work on a click log, without the network: the same batches of a
// Criteo-format log as raw keys into a dynamic table and as hashed buckets into a fixed
// one, a step each as a PS serves it (the pull's read of the batch's distinct rows, then
// the push's update of them):
//
//   build/bin/bench_table_ops --data /tmp/troupe-stream-tables/log-2000000.txt --rounds 3
//
// Dynamic: DynamicTable::lookup then DynamicTable::apply (admission after --min-count
// occurrences, at most --max-rows rows). Fixed: a gather of the rows, then the optimizer's
// apply_sparse on a table of --buckets-per-field rows a field. Both Adagrad, width
// --width, the batch's distinct ids as a worker sends them (core::unique_ids: sorted, each
// once). Each round is a fresh pair of tables over the whole log, dynamic and fixed
// alternated step by step (noise hits both alike). One JSON line per round, then the
// medians: microseconds a step of each, and dynamic over fixed.
#include <chrono>
#include <iostream>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "bench_stats.hpp"
#include "core/data/record_io.hpp"
#include "core/data/text_formats.hpp"
#include "core/dynamic_table.hpp"
#include "core/json_text.hpp"
#include "core/nn/ctr_model.hpp"
#include "core/optimizer.hpp"
#include "examples/command_line.hpp"

using troupe::bench::clock_type;
using troupe::bench::seconds_since;
namespace tc = troupe::core;

namespace {

struct Step {
  std::vector<int64_t> keys, buckets;  // distinct, sorted
};

tc::Expected<std::vector<Step>> read_steps(const std::string& path, int64_t lines, int64_t batch,
                                           int64_t buckets) {
  auto reader = tc::LineReader::open(path);
  if (!reader) return reader.error();
  tc::CriteoOptions raw, hashed;
  raw.raw_keys = true;
  hashed.buckets_per_field = buckets;
  std::vector<Step> steps;
  std::vector<int64_t> keys, ids;
  std::vector<int32_t> index;
  tc::RawRecord line;
  tc::Example e;
  for (int64_t n = 0; lines <= 0 || n < lines;) {
    auto more = reader->next(line);
    if (!more) return more.error();
    if (!*more) break;
    for (auto* o : {&raw, &hashed}) {
      auto parsed = tc::parse_criteo_line(line, *o, e);
      if (!parsed) return parsed.error();
      if (!*parsed) break;
      (o == &raw ? keys : ids).insert((o == &raw ? keys : ids).end(), e.ids.begin(), e.ids.end());
    }
    if (++n % batch == 0) {
      Step s;
      tc::unique_ids(keys, s.keys, index);
      tc::unique_ids(ids, s.buckets, index);
      steps.push_back(std::move(s));
      keys.clear();
      ids.clear();
    }
  }
  return steps;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string program = "bench_table_ops";
  CLI::App app{"a PS task's table work on a click log: dynamic against fixed"};
  std::string data;
  int64_t lines = 0, batch = 1024, buckets = 65536, max_rows = 1000000, width = 9;
  int min_count = 2, rounds = 3;
  app.add_option("--data", data, "a Criteo-format log (ctr_datagen --raw-ids)")->required();
  app.add_option("--lines", lines, "lines to read (0: all)")->check(CLI::NonNegativeNumber);
  app.add_option("--batch", batch)->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  app.add_option("--buckets-per-field", buckets)->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  app.add_option("--max-rows", max_rows)->check(CLI::Range(int64_t{0}, tc::max_table_rows));
  app.add_option("--min-count", min_count)->check(CLI::Range(1, 65535));
  app.add_option("--width", width, "floats a row (dim + 1 in ctr_ps)")->check(CLI::Range(1, 1024));
  app.add_option("--rounds", rounds)->check(CLI::Range(1, 100));
  if (auto end = troupe::examples::parse_command_line(app, argc, argv, program)) return *end;

  auto steps = read_steps(data, lines, batch, buckets);
  if (!steps) return troupe::examples::fail(program, steps.error());
  if (steps->empty()) return troupe::examples::fail(program, data + ": not one full batch");
  const int64_t fixed_rows = buckets * tc::criteo_categorical_fields;
  std::vector<double> dyn_us, fixed_us, ratio;
  std::vector<float> out;
  for (int round = 0; round < rounds; ++round) {
    tc::DynamicTableOptions o;
    o.width = width;
    o.max_rows = max_rows;
    o.min_count = min_count;
    o.init = tc::Initializer{tc::Initializer::Kind::random_uniform, 0.05f, 7};
    tc::DynamicTable dynamic(o, tc::make_optimizer("adagrad", 0.1f).value());
    auto adagrad = tc::make_optimizer("adagrad", 0.1f).value();
    tc::Tensor fixed = tc::initialize(tc::Shape{fixed_rows, width}, o.init);
    tc::SlotSet slots = adagrad->make_slots(fixed.shape());
    double dyn_s = 0, fixed_s = 0;
    for (const Step& s : *steps) {
      const auto nk = static_cast<int64_t>(s.keys.size());
      const auto nb = static_cast<int64_t>(s.buckets.size());
      tc::Tensor gk(tc::Shape{nk, width}), gb(tc::Shape{nb, width});
      std::fill_n(gk.data(), gk.size(), 0.01f);
      std::fill_n(gb.data(), gb.size(), 0.01f);
      out.resize(static_cast<size_t>(std::max(nk, nb) * width));
      auto t0 = clock_type::now();
      dynamic.lookup(s.keys.data(), s.keys.size(), out.data());
      auto applied = dynamic.apply(s.keys, gk.view());
      dyn_s += seconds_since(t0);
      if (!applied) return troupe::examples::fail(program, applied.error());
      t0 = clock_type::now();
      for (int64_t i = 0; i < nb; ++i)
        std::copy_n(fixed.data() + s.buckets[static_cast<size_t>(i)] * width, width,
                    out.data() + i * width);
      applied = adagrad->apply_sparse(fixed.view(), s.buckets, gb.view(), slots);
      fixed_s += seconds_since(t0);
      if (!applied) return troupe::examples::fail(program, applied.error());
    }
    const double n = static_cast<double>(steps->size());
    dyn_us.push_back(1e6 * dyn_s / n);
    fixed_us.push_back(1e6 * fixed_s / n);
    ratio.push_back(dyn_s / fixed_s);
    std::cout << troupe::core::json_text(
                     nlohmann::json{{"bench", program},
                                    {"round", round},
                                    {"steps", steps->size()},
                                    {"dynamic_us_a_step", dyn_us.back()},
                                    {"fixed_us_a_step", fixed_us.back()},
                                    {"dynamic_rows", dynamic.rows()},
                                    {"rows_admitted", dynamic.counters().admitted},
                                    {"rows_evicted", dynamic.counters().evicted_cap},
                                    {"grads_dropped_unadmitted", dynamic.counters().grads_dropped}})
              << std::endl;
  }
  size_t distinct_keys = 0;
  for (const Step& s : *steps)
    distinct_keys += s.keys.size();
  std::cout << troupe::core::json_text(nlohmann::json{
                   {"ok", true},
                   {"bench", program},
                   {"rounds", rounds},
                   {"steps", steps->size()},
                   {"distinct_keys_a_step",
                    static_cast<double>(distinct_keys) / static_cast<double>(steps->size())},
                   {"dynamic_us_a_step_median", troupe::bench::median(dyn_us)},
                   {"fixed_us_a_step_median", troupe::bench::median(fixed_us)},
                   {"dynamic_over_fixed_median", troupe::bench::median(ratio)}})
            << std::endl;
  return 0;
}
