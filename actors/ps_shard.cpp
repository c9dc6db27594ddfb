#include "actors/ps_shard.hpp"

#include <iostream>

#include "core/checkpoint/checkpoint_manager.hpp"

namespace troupe::actors {

namespace {

template <class T>
caf::result<T> reply(core::Expected<T> r) {
  if (!r) return net::to_caf(r.error());
  return std::move(*r);
}

// Writes a snapshot when variables were created or updates applied since the last one
// (the first one as soon as the variables exist: a task lost before its first update must
// come back with them); a failed write is reported (once) and the shard keeps serving.
void take_snapshot(caf::stateful_actor<PsShardActorState>* self) {
  auto& st = self->state;
  const int64_t applied = st.shard.counters().updates_applied;
  const int64_t variables = st.shard.counters().variables;
  if (applied == st.snapshotted_updates && variables == st.snapshotted_variables) return;
  core::CheckpointManager m(st.options.snapshot_dir, /*max_to_keep=*/2, "ps");
  auto written = m.save(st.shard.snapshot(), st.snapshots);
  if (!written) {
    if (!st.snapshot_failed)
      std::cerr << "troupe: PS snapshot failed: " << written.error().message << std::endl;
    st.snapshot_failed = true;
    return;
  }
  st.snapshot_failed = false;
  st.snapshotted_updates = applied;
  st.snapshotted_variables = variables;
  ++st.snapshots;
}

}  // namespace

caf::behavior ps_shard(caf::stateful_actor<PsShardActorState>* self, PsShardOptions options) {
  if (options.initial) self->state.shard = std::move(*options.initial);
  options.initial.reset();
  self->state.options = std::move(options);
  if (!self->state.options.snapshot_dir.empty()) {
    // Numbered on from what is in the directory, so a restarted task's snapshots sort after
    // the one it restored.
    core::CheckpointManager m(self->state.options.snapshot_dir, 2, "ps");
    auto existing = m.checkpoints();
    if (!existing.empty()) self->state.snapshots = existing.back().first + 1;
    self->state.snapshotted_updates = self->state.shard.counters().updates_applied;
    self->state.snapshotted_variables = self->state.shard.counters().variables;
    self->delayed_send(self, self->state.options.snapshot_interval, net::snapshot_atom::value);
  }
  return {
      [=](net::snapshot_atom) {
        take_snapshot(self);
        self->delayed_send(self, self->state.options.snapshot_interval, net::snapshot_atom::value);
      },
      [=](net::create_atom, const net::VariableDef& def) -> caf::result<caf::ok_atom> {
        if (auto st = self->state.shard.create(def); !st) return net::to_caf(st.error());
        return caf::ok_atom::value;
      },
      [=](net::pull_atom, const std::string& name) { return reply(self->state.shard.pull(name)); },
      [=](net::pull_rows_atom, const std::string& name, const std::vector<int64_t>& rows) {
        return reply(self->state.shard.pull_rows(name, rows));
      },
      [=](net::push_atom, uint64_t closure_id, const std::string& name, const net::WireTensor& g) {
        return reply(self->state.shard.push(closure_id, name, g));
      },
      [=](net::push_pull_atom, uint64_t closure_id, const std::string& name,
          const net::WireTensor& g) {
        return reply(self->state.shard.push_pull(closure_id, name, g));
      },
      [=](net::push_rows_atom, uint64_t closure_id, const std::string& name,
          const net::RowsUpdate& u) {
        return reply(self->state.shard.push_rows(closure_id, name, u));
      },
      [=](net::state_atom, const std::string& name) {
        return reply(self->state.shard.state(name));
      },
      [=](net::assign_atom, const std::string& name,
          const net::ShardState& state) -> caf::result<caf::ok_atom> {
        if (auto st = self->state.shard.assign(name, state); !st) return net::to_caf(st.error());
        self->state.snapshotted_updates = -1;  // the next snapshot must include it
        return caf::ok_atom::value;
      },
      [=](net::batch_atom, net::PsRequest& request) {
        return reply(self->state.shard.handle(request));
      },
      [=](net::channel_atom) { return self->state.channel_port; },
      [=](net::channel_atom, int32_t port) { self->state.channel_port = port; },
      [=](net::shutdown_atom) { self->quit(); },
      [=](net::stats_atom) {
        const auto& c = self->state.shard.counters();
        return std::vector<int64_t>{c.variables,          c.pulls,
                                    c.updates_applied,    c.updates_duplicate,
                                    c.requests_rejected,  self->state.shard.restored_from(),
                                    self->state.snapshots};
      },
  };
}

}  // namespace troupe::actors
