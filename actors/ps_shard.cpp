#include "actors/ps_shard.hpp"

#include <unistd.h>

#include <charconv>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <random>
#include <set>
#include <shared_mutex>

#include "core/checkpoint/checkpoint_manager.hpp"

namespace troupe::actors {

namespace {

template <class T>
caf::result<T> reply(core::Expected<T> r) {
  if (!r) return net::to_caf(r.error());
  return std::move(*r);
}

std::string delta_prefix(int64_t base) {
  return "delta-" + std::to_string(base);
}

// Removes the deltas whose full snapshot is no longer kept.
void remove_orphan_deltas(const std::string& dir) {
  std::set<int64_t> kept;
  for (const auto& [number, path] : core::CheckpointManager(dir, 2, "ps").checkpoints())
    kept.insert(number);
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    int64_t base = 0;
    const char* first = name.c_str() + 6;
    if (name.rfind("delta-", 0) != 0) continue;
    auto [p, err] = std::from_chars(first, name.c_str() + name.size(), base);
    if (err != std::errc() || *p != '-' || kept.count(base) != 0) continue;
    std::error_code gone;
    std::filesystem::remove(it->path(), gone);
  }
}

// Takes in the outcome of a finished write.
void finish_snapshot(caf::stateful_actor<PsShardActorState>* self) {
  auto& st = self->state;
  if (!st.writing || !st.writing->done.load(std::memory_order_acquire)) return;
  std::unique_ptr<SnapshotWrite> w = std::move(st.writing);
  w->thread.join();
  st.snapshot_write_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::steady_clock::now() - w->taken)
                             .count();
  if (!w->result) {
    if (!st.snapshot_failed)
      std::cerr << "troupe: PS snapshot failed: " << w->result.error().message << std::endl;
    st.snapshot_failed = true;
    st.chain_base = -1;      // what the copy held since the last one is on no disk: full next
    ++st.snapshot_failures;  // the coordinator polls it, reports it and warns
    return;
  }
  st.snapshot_failed = false;
  st.last_snapshot = w->taken;  // the state it holds is as old as its copy
  st.snapshot_updates = w->updates;
  if (w->delta) {
    st.chain_length = w->index;
    st.snapshot_delta_bytes = w->bytes;
  } else {
    st.chain_base = w->number;
    st.chain_length = 0;
    st.snapshot_full_bytes = w->bytes;
  }
  if (w->assigns == st.assigns) {  // else a shard was overwritten since: snapshot again
    st.snapshotted_updates = w->updates;
    st.snapshotted_variables = w->variables;
  }
  st.snapshots = std::max(st.snapshots, w->number + 1);
}

// Copies the next shard of the snapshot being built; with every shard copied, hands the
// copy to a thread of its own to write, else asks itself (behind the requests already
// queued) for the next shard.
void snapshot_step(caf::stateful_actor<PsShardActorState>* self) {
  auto& st = self->state;
  if (!st.building) return;
  SnapshotBuild& b = *st.building;
  const auto t0 = std::chrono::steady_clock::now();
  if (!b.left.empty()) {
    // Shared: pulls go on, no update lands inside the copy.
    std::shared_lock<WriterFirstLock> lock(st.shared->lock);
    const std::string& name = b.left.back();
    if (b.delta)
      st.shard().snapshot_shard_delta(name, *b.copy);
    else
      st.shard().snapshot_shard(name, *b.copy);  // a shard gone meanwhile is skipped
    // The next delta starts from this copy. Only this thread changes the shards, and the
    // bookkeeping it clears is read by no reader: the shared lock suffices.
    if (st.shard().tracking_deltas()) st.shard().mark_copied(name);
    b.left.pop_back();
  }
  b.longest_step_us = std::max<int64_t>(
      b.longest_step_us,
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0)
          .count());
  if (!b.left.empty()) {
    self->send(self, net::snapstep_atom::value);
    return;
  }
  {
    std::shared_lock<WriterFirstLock> lock(st.shared->lock);
    st.shard().snapshot_counters(*b.copy);
  }
  st.snapshot_copy_us = b.longest_step_us;
  auto w = std::make_unique<SnapshotWrite>();
  w->taken = b.taken;
  w->updates = b.updates;
  w->variables = b.variables;
  w->assigns = b.assigns;
  w->number = st.snapshots;
  w->delta = b.delta;
  if (b.delta) {
    w->base = st.chain_base;
    w->index = st.chain_length + 1;
    b.copy->ints["delta"] = {w->base, w->index};
  }
  std::shared_ptr<const core::Checkpoint> copy = std::move(b.copy);
  st.building.reset();
  SnapshotWrite* out = w.get();
  w->thread = std::thread([out, copy, dir = st.options.snapshot_dir] {
    auto written =
        out->delta
            ? core::CheckpointManager(dir, 0, delta_prefix(out->base)).save(*copy, out->index)
            : core::CheckpointManager(dir, /*max_to_keep=*/2, "ps").save(*copy, out->number);
    if (!written) {
      out->result = written.error();
    } else {
      std::error_code ec;
      out->bytes = static_cast<int64_t>(std::filesystem::file_size(*written, ec));
      if (!out->delta) remove_orphan_deltas(dir);
    }
    out->done.store(true, std::memory_order_release);
  });
  st.writing = std::move(w);
}

// Starts a snapshot when variables were created or updates applied since the last one
// (the first one as soon as the variables exist: a task lost before its first update must
// come back with them) and none is being copied or written; a failed write is reported
// (once) and the shard keeps serving.
void take_snapshot(caf::stateful_actor<PsShardActorState>* self) {
  finish_snapshot(self);
  auto& st = self->state;
  if (st.writing || st.building) return;
  int64_t applied = 0, variables = 0;
  std::vector<std::string> names;
  {
    // The tensor channel applies updates too (under the lock held exclusively).
    std::shared_lock<WriterFirstLock> lock(st.shared->lock);
    applied = st.shard().counters().updates_applied;
    variables = st.shard().counters().variables;
    if (applied == st.snapshotted_updates && variables == st.snapshotted_variables) return;
    names = st.shard().shard_names();
  }
  st.building = std::make_unique<SnapshotBuild>();
  st.building->taken = std::chrono::steady_clock::now();
  st.building->updates = applied;
  st.building->variables = variables;
  st.building->assigns = st.assigns;
  st.building->left = std::move(names);
  // A delta follows the newest full snapshot on disk; one in `snapshot_full_every` is full.
  st.building->delta = st.options.snapshot_full_every > 1 && st.chain_base >= 0 &&
                       st.chain_length + 1 < st.options.snapshot_full_every;
  snapshot_step(self);
}

}  // namespace

namespace {

// This process's resident memory in bytes (0 where /proc cannot tell).
int64_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t pages = 0, resident = 0;
  if (!(statm >> pages >> resident)) return 0;
  return resident * static_cast<int64_t>(::sysconf(_SC_PAGESIZE));
}

}  // namespace

caf::behavior ps_shard(caf::stateful_actor<PsShardActorState>* self, PsShardOptions options) {
  self->state.process = static_cast<int64_t>(std::random_device{}() & 0x7fffffffu) << 31 |
                        static_cast<int64_t>(std::random_device{}() & 0x7fffffffu) | 1;
  if (options.shared) self->state.shared = options.shared;
  if (options.initial) {
    std::unique_lock<WriterFirstLock> lock(self->state.shared->lock);
    self->state.shard() = std::move(*options.initial);
  }
  options.initial.reset();
  options.shared.reset();
  self->state.options = std::move(options);
  if (!self->state.options.snapshot_dir.empty()) {
    // Numbered on from what is in the directory, so a restarted task's snapshots sort after
    // the one it restored.
    core::CheckpointManager m(self->state.options.snapshot_dir, 2, "ps");
    auto existing = m.checkpoints();
    for (const auto& [number, path] : existing)
      self->state.snapshots = std::max(self->state.snapshots, number + 1);
    if (!existing.empty()) {
      // The snapshot restored from (the newest) is as old as its file.
      std::error_code ec;
      const auto written = std::filesystem::last_write_time(existing.back().second, ec);
      if (!ec)
        self->state.last_snapshot = std::chrono::steady_clock::now() -
                                    std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                        std::filesystem::file_time_type::clock::now() - written);
    }
    std::unique_lock<WriterFirstLock> lock(self->state.shared->lock);
    // The first snapshot of a process is full (chain_base -1); deltas follow it.
    if (self->state.options.snapshot_full_every > 1) self->state.shard().track_deltas(true);
    self->state.snapshotted_updates = self->state.shard().counters().updates_applied;
    self->state.snapshotted_variables = self->state.shard().counters().variables;
    self->delayed_send(self, self->state.options.snapshot_interval, net::snapshot_atom::value);
  }
  return {
      [=](net::snapshot_atom) {
        take_snapshot(self);
        self->delayed_send(self, self->state.options.snapshot_interval, net::snapshot_atom::value);
      },
      [=](net::snapstep_atom) { snapshot_step(self); },
      [=](net::refused_atom, bool caf_port) {
        ++(caf_port ? self->state.port_refused : self->state.channel_refused);
      },
      [=](net::create_atom, const net::VariableDef& def) -> caf::result<caf::ok_atom> {
        std::unique_lock<WriterFirstLock> lock(self->state.shared->lock);
        if (auto st = self->state.shard().create(def); !st) return net::to_caf(st.error());
        return caf::ok_atom::value;
      },
      // pull and pull_rows count the pull in the state: exclusively, as updates.
      [=](net::pull_atom, const std::string& name) {
        std::unique_lock<WriterFirstLock> lock(self->state.shared->lock);
        return reply(self->state.shard().pull(name));
      },
      [=](net::pull_rows_atom, const std::string& name, const std::vector<int64_t>& rows) {
        std::unique_lock<WriterFirstLock> lock(self->state.shared->lock);
        return reply(self->state.shard().pull_rows(name, rows));
      },
      [=](net::push_atom, uint64_t closure_id, const std::string& name, const net::WireTensor& g) {
        std::unique_lock<WriterFirstLock> lock(self->state.shared->lock);
        return reply(self->state.shard().push(closure_id, name, g));
      },
      [=](net::push_pull_atom, uint64_t closure_id, const std::string& name,
          const net::WireTensor& g) {
        std::unique_lock<WriterFirstLock> lock(self->state.shared->lock);
        return reply(self->state.shard().push_pull(closure_id, name, g));
      },
      [=](net::push_rows_atom, uint64_t closure_id, const std::string& name,
          const net::RowsUpdate& u) {
        std::unique_lock<WriterFirstLock> lock(self->state.shared->lock);
        return reply(self->state.shard().push_rows(closure_id, name, u));
      },
      [=](net::rows_page_atom, const std::string& name, int64_t from, int64_t limit,
          int32_t min_count) {
        return reply(
            self->state.shard().rows_page(name, from, limit, min_count));  // reads: no lock
      },
      [=](net::defs_atom) {
        std::shared_lock<WriterFirstLock> lock(self->state.shared->lock);
        return self->state.shard().definitions();
      },
      [=](net::state_atom, const std::string& name) {
        std::unique_lock<WriterFirstLock> lock(self->state.shared->lock);  // counts a miss
        return reply(self->state.shard().state(name));
      },
      [=](net::assign_atom, const std::string& name,
          const net::ShardState& state) -> caf::result<caf::ok_atom> {
        std::unique_lock<WriterFirstLock> lock(self->state.shared->lock);
        if (auto st = self->state.shard().assign(name, state); !st) return net::to_caf(st.error());
        self->state.snapshotted_updates = -1;  // the next snapshot must include it
        ++self->state.assigns;
        return caf::ok_atom::value;
      },
      [=](net::batch_atom, net::PsRequest& request) -> caf::result<std::vector<net::PsItem>> {
        if (request.wire == net::WireDtype::bfloat16) ++self->state.bf16_requests;
        // The epoch is checked under the lock that applies the request: a shard copy for
        // a rejoining replica raises it under that lock, so no update routed without the
        // replica lands after the copy.
        std::unique_lock<WriterFirstLock> lock(self->state.shared->lock);
        if (auto st = self->state.shared->leased(); !st) return net::to_caf(st.error());
        if (auto fresh = self->state.shared->admit(request.epoch); !fresh)
          return net::to_caf(fresh.error());
        return reply(self->state.shard().handle(request));
      },
      [=](net::lease_atom, int64_t ms) {
        self->state.shared->renew(std::chrono::milliseconds(ms));
      },
      [=](net::rejoin_shards_atom,
          const std::vector<net::VariableDef>& defs) -> caf::result<caf::ok_atom> {
        std::unique_lock<WriterFirstLock> lock(self->state.shared->lock);
        if (auto st = self->state.shard().rejoin(defs); !st) return net::to_caf(st.error());
        self->state.snapshotted_updates = -1;
        ++self->state.assigns;
        return caf::ok_atom::value;
      },
      [=](net::shard_copy_atom, const std::string& key,
          uint64_t epoch) -> caf::result<net::ShardCopy> {
        std::unique_lock<WriterFirstLock> lock(self->state.shared->lock);
        if (auto fresh = self->state.shared->admit(epoch); !fresh)
          return net::to_caf(fresh.error());
        auto copy = self->state.shard().copy_shard(key);
        if (!copy) return net::to_caf(copy.error());
        return to_shard_copy(*copy);
      },
      [=](net::install_atom, const std::string& key,
          const net::ShardCopy& c) -> caf::result<caf::ok_atom> {
        auto copy = from_shard_copy(c);
        if (!copy) return net::to_caf(copy.error());
        std::unique_lock<WriterFirstLock> lock(self->state.shared->lock);
        if (auto st = self->state.shard().install(key, *copy); !st) return net::to_caf(st.error());
        self->state.snapshotted_updates = -1;
        ++self->state.assigns;
        return caf::ok_atom::value;
      },
      [=](net::failover_atom, uint64_t epoch, const std::vector<int32_t>&,
          const std::vector<int32_t>&) {
        (void)self->state.shared->admit(epoch);  // from the chief: requests routed before it fail
      },
      [=](net::channel_atom) { return self->state.channel_port; },
      [=](net::channel_atom, int32_t port) { self->state.channel_port = port; },
      [=](net::shutdown_atom) {
        self->quit();
        std::cerr << "troupe: the PS task acknowledges the shutdown" << std::endl;  // its log
        return caf::ok_atom::value;  // acknowledged: the chief may exit now
      },
      [=](net::stats_atom) {
        finish_snapshot(self);
        const auto& st = self->state;
        std::shared_lock<WriterFirstLock> lock(st.shared->lock);
        const auto& c = st.shard().counters();
        net::PsStats s;
        s.variables = c.variables;
        s.pulls = c.pulls + st.shared->pulls.load(std::memory_order_relaxed);
        s.rows_pulled = c.load.rows_out + st.shared->rows_pulled.load(std::memory_order_relaxed);
        s.bytes_pulled = c.load.bytes_out + st.shared->bytes_pulled.load(std::memory_order_relaxed);
        s.rows_pushed = c.load.rows_in;
        s.bytes_pushed = c.load.bytes_in;
        s.updates_applied = c.updates_applied;
        s.updates_duplicate = c.updates_duplicate;
        s.requests_rejected =
            c.requests_rejected + st.shared->rejected.load(std::memory_order_relaxed);
        s.restored_from = st.shard().restored_from();
        s.snapshots = st.snapshots;
        s.snapshot_failures = st.snapshot_failures;
        if (st.last_snapshot)
          s.snapshot_age_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                  std::chrono::steady_clock::now() - *st.last_snapshot)
                                  .count();
        s.process = st.process;
        s.rss_bytes = resident_bytes();
        s.applied_tags = static_cast<int64_t>(st.shard().applied_tags());
        s.snapshot_copy_us = st.snapshot_copy_us;
        s.snapshot_full_bytes = st.snapshot_full_bytes;
        s.snapshot_delta_bytes = st.snapshot_delta_bytes;
        s.snapshot_updates = st.snapshot_updates;
        s.snapshot_write_ms = st.snapshot_write_ms;
        s.channel_refused = st.channel_refused;
        s.port_refused = st.port_refused;
        s.bf16_requests =
            st.bf16_requests + st.shared->bf16_requests.load(std::memory_order_relaxed);
        const auto tables = st.shard().table_totals();
        s.table_rows = tables.rows;
        s.rows_admitted = tables.admitted;
        s.rows_evicted = tables.evicted;
        s.grads_dropped_unadmitted = tables.grads_dropped;
        s.table_bytes = tables.bytes;
        return s.to_vector();
      },
  };
}

core::Expected<std::optional<PsRestore>> restore_ps_snapshots(const std::string& dir,
                                                              std::vector<core::Error>* skipped) {
  std::vector<core::Error> passed;
  if (skipped == nullptr) skipped = &passed;
  core::CheckpointManager fulls(dir, 2, "ps");
  if (fulls.checkpoints().empty()) return std::optional<PsRestore>();
  PsRestore r;
  // A full snapshot whose records do not hold (load() checks each against its variable's
  // definition) is skipped for the one before it, as one that cannot be read is.
  std::optional<PsShardState> state;
  auto latest = fulls.restore_latest(skipped, [&](const core::Checkpoint& c) -> core::Status {
    auto loaded = PsShardState::from_snapshot(c);
    if (!loaded) return loaded.error();
    state.emplace(std::move(*loaded));
    return {};
  });
  if (!latest)
    return make_error(latest.error().code,
                      "cannot restore from " + dir + ": " + latest.error().message);
  r.full = latest->first;
  r.state = std::make_shared<PsShardState>(std::move(*state));
  // Its deltas in order: k = 1, 2, ... with none missing; the first that does not apply
  // ends the chain (a delta only makes sense on top of the one before it).
  auto deltas = core::CheckpointManager(dir, 0, delta_prefix(r.full)).checkpoints();
  std::sort(deltas.begin(), deltas.end());
  for (const auto& [index, path] : deltas) {
    if (index != r.deltas + 1) {
      skipped->push_back(make_error(core::Errc::data_loss,
                                    path + ": delta " + std::to_string(index) + " follows " +
                                        std::to_string(r.deltas) + " (one missing)"));
      break;
    }
    auto delta = core::read_checkpoint(path);
    core::Status applied = delta ? core::Status() : core::Status(delta.error());
    if (applied.ok()) {
      const auto mark = delta->ints.find("delta");
      if (mark == delta->ints.end() || mark->second != std::vector<int64_t>{r.full, index})
        applied = make_error(core::Errc::data_loss, path + ": not delta " + std::to_string(index) +
                                                        " of snapshot " + std::to_string(r.full));
    }
    if (applied.ok()) {
      applied = r.state->apply_delta(*delta);
      if (!applied.ok())
        applied = make_error(applied.error().code, path + ": " + applied.error().message);
    }
    if (!applied.ok()) {
      skipped->push_back(applied.error());
      // A delta that failed half-way left the state partly changed: rebuild it up to the
      // delta before (rare, so no copy is kept per delta, which would double the memory).
      auto again = PsShardState::from_snapshot(latest->second);
      if (!again) return again.error();
      r.state = std::make_shared<PsShardState>(std::move(*again));
      for (int64_t k = 1; k <= r.deltas; ++k) {
        auto d = core::read_checkpoint(deltas[static_cast<size_t>(k - 1)].second);
        if (!d) return make_error(d.error().code, dir + ": " + d.error().message);
        if (auto st = r.state->apply_delta(*d); !st) return st.error();
      }
      break;
    }
    ++r.deltas;
  }
  return std::optional<PsRestore>(std::move(r));
}

}  // namespace troupe::actors
