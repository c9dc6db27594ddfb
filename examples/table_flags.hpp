#pragma once

// --table and the dynamic table's flags, the same in ctr_ps and ctr_fit.
//
//   examples::TableFlags table;
//   table.add(app);
//   ...
//   if (table.dynamic()) spec.dynamic_table = table.spec;

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "core/data/text_formats.hpp"
#include "core/nn/ctr_export.hpp"
#include "troupe/strategy.hpp"

namespace troupe::examples {

struct TableFlags {
  std::string kind = "fixed";  // or "dynamic": rows keyed by raw ids (core/dynamic_table.hpp)
  DynamicTableSpec spec;       // width and shards are the program's to set

  bool dynamic() const { return kind == "dynamic"; }

  /// The model's shape as an export holds it (`buckets`: a fixed table's per field), and
  /// the optimizer it trains with (the compile settings of its Keras form).
  core::CtrExportConfig export_config(const core::CtrModelConfig& model, int64_t buckets,
                                      const std::string& optimizer, float lr) const {
    core::CtrExportConfig c;
    c.model = model;
    c.optimizer = optimizer;
    c.learning_rate = lr;
    c.dynamic = dynamic();
    c.buckets_per_field = c.dynamic ? 0 : buckets;
    return c;
  }

  /// How the input reads ids for this table: raw keys for a dynamic one; for a fixed one,
  /// each Criteo value hashed into `buckets` of its field, and a TFRecord raw key too.
  core::CriteoOptions criteo(int64_t buckets) const {
    core::CriteoOptions c;
    c.buckets_per_field = buckets;
    c.raw_keys = dynamic();
    c.bucket_tfrecord_keys = !dynamic();
    return c;
  }

  void add(CLI::App& app) {
    app.add_option("--table", kind,
                   "fixed: hashed buckets per field; dynamic: rows keyed by each value's 64-bit "
                   "key, admitted and evicted on the PS tasks")
        ->check(CLI::IsMember({"fixed", "dynamic"}));
    app.add_option("--max-rows", spec.max_rows, "dynamic: cap on the table's rows (0: none)")
        ->check(CLI::NonNegativeNumber);
    app.add_option("--min-count", spec.min_count,
                   "dynamic: occurrences (batches) before a key gets a row")
        ->check(CLI::Range(0, 65535));
    app.add_option("--admit-probability", spec.admit_probability,
                   "dynamic: below 1, admit each occurrence with this probability instead")
        ->check(CLI::Range(1e-6, 1.0));
    app.add_option("--ttl-steps", spec.ttl_steps,
                   "dynamic: evict rows not updated for this many pushes to their shard (0: never)")
        ->check(CLI::NonNegativeNumber);
    app.add_option("--sketch-width", spec.sketch_width,
                   "dynamic: count-min counters per hash function (4 functions, 2 bytes each, "
                   "per shard; 0: the shard's row cap, in [2^12, 2^20])")
        ->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  }
};

/// The PS tasks' dynamic-table figures summed (table_rows, rows_admitted, rows_evicted,
/// grads_dropped_unadmitted, table_bytes, snapshot_full_bytes, snapshot_delta_bytes).
inline PsTaskStats sum_tables(const std::vector<PsTaskStats>& tasks) {
  PsTaskStats sum;
  for (const auto& p : tasks) {
    sum.table_rows += p.table_rows;
    sum.rows_admitted += p.rows_admitted;
    sum.rows_evicted += p.rows_evicted;
    sum.grads_dropped_unadmitted += p.grads_dropped_unadmitted;
    sum.table_bytes += p.table_bytes;
    sum.snapshot_full_bytes += p.snapshot_full_bytes;
    sum.snapshot_delta_bytes += p.snapshot_delta_bytes;
  }
  return sum;
}

}  // namespace troupe::examples
