#pragma once

// A PS state the fuzz targets and their seeds share: the base a fuzzed delta snapshot is
// applied to (fuzz_checkpoint), and that fuzz_seeds writes a valid delta of.

#include "actors/ps_shard_state.hpp"

namespace troupe::fuzz {

/// Adds a dynamic table "ids" (8 rows at most, Adagrad) with three rows and a dense "d",
/// turns delta tracking on, and marks every shard just copied (the next delta starts here).
inline core::Status delta_base(actors::PsShardState& state) {
  net::VariableDef table;
  table.name = "ids";
  table.shape = {8, 2};
  table.optimizer = "adagrad";
  table.learning_rate = 0.1f;
  table.dynamic = true;
  net::VariableDef dense;
  dense.name = "d";
  dense.shape = {3};
  dense.optimizer = "sgd";
  dense.learning_rate = 0.1f;
  state.track_deltas(true);
  if (auto st = state.create(table); !st) return st;
  if (auto st = state.create(dense); !st) return st;
  auto pushed = state.push_rows(1, "ids#0", {{5, -9, 1ll << 40}, {{3, 2}, {1, 2, 3, 4, 5, 6}}});
  if (!pushed) return pushed.error();
  for (const auto& name : state.shard_names())
    state.mark_copied(name);
  return {};
}

}  // namespace troupe::fuzz
