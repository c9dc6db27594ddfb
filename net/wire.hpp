#pragma once

// Every message type that crosses an actor boundary, their CAF type IDs and the atoms of
// the protocol: one file, so that a reader finds the whole wire vocabulary here.
// docs/wire-format.md describes the same in prose.

#include <array>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include <caf/all.hpp>

#include "core/expected.hpp"
#include "core/tensor.hpp"
#include "net/wire_dtype.hpp"

namespace troupe::net::detail {

/// What is left of the payload a deserializer reads: the most bytes a length read from it
/// can honestly announce. BASP hands Troupe's inspect functions a caf::deserializer whose
/// dynamic type is binary_deserializer; any other gets `fallback`.
inline size_t bytes_left(const caf::deserializer& f, size_t fallback) {
  const auto* bounded = dynamic_cast<const caf::binary_deserializer*>(&f);
  return bounded != nullptr ? std::min(fallback, bounded->remaining()) : fallback;
}

}  // namespace troupe::net::detail

namespace caf {

/// Loading the bytes of closure arguments and results (std::vector<char>, in ClosureMsg
/// and as a message of their own). CAF 0.17 resizes a byte sequence to the length its
/// sender announced before reading a byte of it, so a 10-byte payload could make a
/// process allocate 4 GiB (found by tests/fuzz/fuzz_caf_messages). Found by ADL for
/// caf::deserializer, this takes precedence over CAF's own loading: a length past what is
/// left of the payload is refused first. Saving is CAF's own (the same layout).
template <class Inspector>
typename std::enable_if<std::is_same<Inspector, deserializer>::value, error>::type inspect(
    Inspector& f, std::vector<char>& x) {
  size_t n = 0;
  if (auto err = f.begin_sequence(n)) return err;
  if (n > troupe::net::detail::bytes_left(f, size_t{1} << 30))
    return make_error(sec::end_of_stream);
  x.resize(n);
  if (n > 0)
    if (auto err = f.apply_raw(n, x.data())) return err;
  return f.end_sequence();
}

}  // namespace caf

namespace troupe::net {

/// A tensor on the wire: its shape and its float32 payload, written as one raw block
/// (host byte order; every node of a cluster runs the same binary on the same platform).
struct WireTensor {
  std::vector<int64_t> dims;
  std::vector<float> data;

  static WireTensor from(core::ConstTensorView v);
  core::ConstTensorView view() const;
  /// The shape is valid and matches the payload size.
  bool consistent() const { return holds(data.size()); }
  /// The shape is valid and holds exactly n values (a reader checks this before it has
  /// the payload).
  bool holds(uint64_t n) const;
};

/// The whole variable from its shards' tensors, in shard order, laid out by `row_stride`
/// (VariableDef's: 1, or the shard count for interleaved rows); an inconsistent tensor is
/// a data_loss error.
core::Expected<core::Tensor> concat_shards(const std::vector<WireTensor>& shards,
                                           int64_t row_stride = 1);

/// What a PS shard needs to create its slice of a variable and its optimizer state.
struct VariableDef {
  std::string name;            // the variable's name, unique in the job
  int32_t shard = 0;           // which shard this is
  int64_t row_offset = 0;      // first row of the full variable held here
  std::vector<int64_t> shape;  // the shard's shape
  int32_t init_kind = 0;       // core::Initializer::Kind
  float init_value = 0.0f;
  uint64_t seed = 0;
  std::string optimizer;  // core::make_optimizer name
  float learning_rate = 0.0f;
  /// A shard of a dynamic table (core/dynamic_table.hpp): rows keyed by 64-bit ids, which
  /// route_rows sends to shard core::dynamic_shard_of(key, shards); the rows ops' `rows`
  /// are then keys. shape is {this shard's max_rows (0: no cap), width}; row_offset is the
  /// shard's number.
  bool dynamic = false;
  int32_t min_count = 1;
  float admit_probability = 1.0f;
  int64_t ttl_steps = 0;
  int64_t sketch_width = 0;  // 0: the table's default
  /// The rows held are row_offset + i * row_stride of the full variable: 1, a run of rows
  /// (core::RowLayout::range); the shard count, interleaved (row_offset is then the shard's
  /// number). Not for dynamic tables.
  int64_t row_stride = 1;
};
/// The rows of the full variable `def` holds.
inline int64_t shard_row_count(const VariableDef& def) {
  return def.shape.empty() ? 1 : def.shape[0];
}
/// The part of a full-variable tensor (a value, a dense gradient) that `def`'s shard holds.
core::Tensor part_for_shard(core::ConstTensorView full, const VariableDef& def);

/// The name a PS task keeps a variable shard under, and the name PS requests use for it:
/// "<variable>#<shard>". Two shards of one variable may live on one PS task.
inline std::string shard_key(const VariableDef& d) {
  return d.name + "#" + std::to_string(d.shard);
}

/// Bytes of one rows-update: rows of a shard (shard-local indices) and their gradients.
struct RowsUpdate {
  std::vector<int64_t> rows;
  WireTensor grads;  // [rows.size(), row width]
};

/// One page of a dynamic table's shard read in slot order (a live export): keys, their
/// rows' value columns [keys, width], and the slot the next page starts from (-1: none left).
struct RowsPage {
  std::vector<int64_t> keys;
  WireTensor values;
  int64_t next = -1;
};

/// A shard's trainable state: its value, its optimizer slots and the optimizer's iteration
/// count (not the closure ids it applied). What a chief's backup saves and puts back.
struct ShardState {
  WireTensor value;
  std::vector<WireTensor> slots;
  int64_t iterations = 0;
};

/// A shard's snapshot entries (a core::Checkpoint's ints and tensors: value, optimizer slots,
/// iterations, the closure tags it applied) on the wire: what a rejoining replica is given.
struct ShardCopy {
  std::vector<std::string> int_keys;
  std::vector<std::vector<int64_t>> ints;
  std::vector<std::string> tensor_keys;
  std::vector<WireTensor> tensors;
};

/// Where one shard of a variable lives: its definition, the PS task holding it (its
/// primary) and, with replicated shards (StrategyOptions::ps_replicas), the tasks holding a
/// copy of it (its backups, in the order they take over). Placements never change during a
/// job: a lost task is left out of them by net::PsRouting.
struct Placement {
  VariableDef def;
  int32_t ps_task = 0;
  std::vector<int32_t> backups;
};

/// Rows of a sharded variable (indices of the full variable) routed to the shards holding
/// them: per shard, in the order of `shards` (sorted by row offset), the shard-local row
/// indices and each row's position in the caller's list.
struct RowRoute {
  std::vector<std::vector<int64_t>> local, where;
  /// Rows given in ascending order: each shard's are one run of the caller's list, from
  /// where[k].front() on, so they are copied to and from it as one block.
  bool contiguous = false;
};
/// A row outside every shard is an out_of_range error naming it and the variable.
core::Expected<RowRoute> route_rows(const std::string& name, const std::vector<Placement>& shards,
                                    const std::vector<int64_t>& rows);
/// Puts the rows shards answered (`parts[k]` for shard k: [local[k].size(), width]) at their
/// positions of `out` ([rows, width]). A part of the wrong size is a data_loss error.
core::Status gather_routed(const std::string& name, const RowRoute& route,
                           const std::vector<const WireTensor*>& parts, core::Tensor& out);
/// The other way: the rows of `all` ([rows, width], in the caller's order) that go to
/// `shard`, in the order of route.local[shard].
std::vector<float> routed_part(const RowRoute& route, size_t shard, core::ConstTensorView all);

/// A closure on the wire: code never travels, only the registered step's name and its
/// msgpack-encoded arguments. The id tags the step's gradient pushes (at-most-once
/// application per shard) and its result.
struct ClosureMsg {
  uint64_t id = 0;
  std::string step;
  std::vector<char> args;
  uint32_t repeat = 1;  // steps_per_execution: the step runs this many times in a row
  /// Every closure id of this chief incarnation below this one is settled (completed,
  /// failed or cancelled) and will never run again: the PS shards may forget the ids
  /// below it and drop their late pushes. Carried on into the step's PS requests.
  uint64_t settled_below = 0;
};

/// What a batched PS request does to each of its items.
enum class PsOp : uint8_t {
  pull = 1,       // item: name          reply: the shard's value
  pull_rows = 2,  // item: name, rows    reply: those rows
  push = 3,       // item: name, tensor  reply: empty item
  push_pull = 4,  // item: name, tensor  reply: the value after the push
  push_rows = 5,  // item: name, rows, tensor (the rows' gradients)  reply: empty item
};
inline constexpr uint8_t max_ps_op = 5;

/// One variable shard's part of a batched request or reply.
struct PsItem {
  std::string name;
  std::vector<int64_t> rows;  // shard-local row indices (rows ops only)
  WireTensor tensor;          // gradient (pushes) or value (replies)
};

/// Everything one step asks of one PS task at once: every shard that task holds of the
/// named variables, one op, one closure tag. Carried as a CAF message or, on the hot
/// path, through the tensor channel (net/channel.hpp). The reply is a vector<PsItem>, one
/// per request item, in order.
struct PsRequest {
  uint8_t op = 0;    // a PsOp
  uint64_t tag = 0;  // the closure tag the pushes are applied under (at most once)
  std::vector<PsItem> items;
  uint64_t settled_below = 0;  // the closure's ClosureMsg::settled_below
  /// The tensor channel's type for this request's tensors and its reply's (not carried in
  /// CAF messages, which are float32).
  WireDtype wire = WireDtype::float32;
  /// The placement epoch the sender routed by (net::PsRouting): a PS task that knows a
  /// newer one refuses the request (`unavailable`, retried after the new placement).
  uint64_t epoch = 0;
};

/// The load one batched request puts on a PS task: rows (of a dense tensor its first
/// dimension, a scalar one row) and value bytes (4 per element, whatever the wire's type)
/// sent to it (pushes) and sent back (pulls, a push_pull's value). Measures how evenly a
/// partitioner spreads the work over the PS tasks.
struct PsLoad {
  int64_t rows_in = 0, bytes_in = 0, rows_out = 0, bytes_out = 0;
};
/// What `request` brings (its items' tensors: gradients; pulls bring none).
PsLoad load_in(const PsRequest& request);
/// What `reply` takes back, added to `load`.
void add_load_out(const std::vector<PsItem>& reply, PsLoad& load);

/// The parts of a closure tag: (closure id << 16) | repetition, and the closure id is
/// (incarnation << 32) + n. A tag of 0 is no closure's (pulls).
inline uint64_t tag_closure(uint64_t tag) {
  return tag >> 16;
}
inline uint32_t tag_incarnation(uint64_t tag) {
  return static_cast<uint32_t>(tag >> 48);
}

/// What a PS task answers to (stats): sent as a vector of int64 in this order, read and
/// written only through this struct. Fields a sender did not have read as their defaults.
struct PsStats {
  int64_t variables = 0;
  int64_t pulls = 0;
  int64_t updates_applied = 0;
  int64_t updates_duplicate = 0;  // pushes of a tag applied before, or of a settled closure
  int64_t requests_rejected = 0;
  int64_t restored_from = -1;  // updates_applied of the snapshot restored at start; -1: none
  int64_t snapshots = 0;       // snapshots written by this process
  int64_t snapshot_failures = 0;
  int64_t snapshot_age_ms = -1;   // since the newest snapshot was written; -1: none yet
  int64_t process = 0;            // random per PS process: a restart changes it
  int64_t rss_bytes = 0;          // the PS process's resident memory
  int64_t applied_tags = 0;       // closure tags held for at-most-once (bounded)
  int64_t snapshot_copy_us = 0;   // the last snapshot's copy of the shards (serving waits)
  int64_t snapshot_write_ms = 0;  // and its write to disk (on a thread of its own)
  int64_t channel_refused = 0;    // tensor-channel connections that did not prove the secret
  int64_t port_refused = 0;       // CAF-port connections the gate refused (net/gate.hpp)
  int64_t bf16_requests = 0;      // requests whose tensors came as bf16 (--wire-dtype bf16)
  // Dynamic tables (summed over this task's shards of them):
  int64_t table_rows = 0;                // rows held now
  int64_t rows_admitted = 0;             // rows created
  int64_t rows_evicted = 0;              // rows removed (expired or to stay under max_rows)
  int64_t grads_dropped_unadmitted = 0;  // gradients of keys without a row
  int64_t table_bytes = 0;               // the tables' memory (rows, metadata, index, sketch)
  int64_t snapshot_full_bytes = 0;       // the newest full snapshot's file
  int64_t snapshot_delta_bytes = 0;      // the newest delta snapshot's file (0: none)
  int64_t snapshot_updates = -1;  // updates_applied in the newest snapshot written (-1: none)
  // The load workers put on this task through batched requests (PsLoad):
  int64_t rows_pulled = 0;
  int64_t rows_pushed = 0;
  int64_t bytes_pulled = 0;
  int64_t bytes_pushed = 0;

  // The one list of the fields, in wire order (append new ones at the end).
  template <class S>
  static auto fields(S& s) {
    return std::array{&s.variables,
                      &s.pulls,
                      &s.updates_applied,
                      &s.updates_duplicate,
                      &s.requests_rejected,
                      &s.restored_from,
                      &s.snapshots,
                      &s.snapshot_failures,
                      &s.snapshot_age_ms,
                      &s.process,
                      &s.rss_bytes,
                      &s.applied_tags,
                      &s.snapshot_copy_us,
                      &s.snapshot_write_ms,
                      &s.channel_refused,
                      &s.port_refused,
                      &s.bf16_requests,
                      &s.table_rows,
                      &s.rows_admitted,
                      &s.rows_evicted,
                      &s.grads_dropped_unadmitted,
                      &s.table_bytes,
                      &s.snapshot_full_bytes,
                      &s.snapshot_delta_bytes,
                      &s.snapshot_updates,
                      &s.rows_pulled,
                      &s.rows_pushed,
                      &s.bytes_pulled,
                      &s.bytes_pushed};
  }

  std::vector<int64_t> to_vector() const {
    std::vector<int64_t> out;
    for (const int64_t* field : fields(*this))
      out.push_back(*field);
    return out;
  }
  static PsStats from(const std::vector<int64_t>& v) {
    PsStats s;
    const auto f = fields(s);
    for (size_t i = 0; i < v.size() && i < f.size(); ++i)
      *f[i] = v[i];
    return s;
  }
};

// Upper bound on one tensor payload: a length field above it, or above the bytes that
// actually arrived, is rejected before anything is allocated.
inline constexpr size_t max_wire_tensor_bytes = size_t{1} << 31;

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, WireTensor& x) {
  if constexpr (std::is_base_of_v<caf::serializer, Inspector>) {
    size_t n = x.data.size();
    return caf::error::eval(
        [&] { return f(caf::meta::type_name("troupe.tensor"), x.dims); },
        [&] { return f.begin_sequence(n); },
        [&] { return n ? f.apply_raw(n * sizeof(float), x.data.data()) : caf::error{}; },
        [&] { return f.end_sequence(); });
  } else if constexpr (std::is_base_of_v<caf::deserializer, Inspector>) {
    size_t n = 0;
    return caf::error::eval([&] { return f(caf::meta::type_name("troupe.tensor"), x.dims); },
                            [&] { return f.begin_sequence(n); },
                            [&]() -> caf::error {
                              // The static type is caf::deserializer under BASP: the
                              // bound must come from the dynamic one (fuzz_caf_messages
                              // found 2 GiB allocated for an 8-byte claim).
                              const size_t limit = detail::bytes_left(f, max_wire_tensor_bytes);
                              if (n > limit / sizeof(float)) return caf::sec::invalid_argument;
                              x.data.resize(n);
                              return n ? f.apply_raw(n * sizeof(float), x.data.data())
                                       : caf::error{};
                            },
                            [&] { return f.end_sequence(); });
  } else {
    return f(caf::meta::type_name("troupe.tensor"), x.dims, x.data);
  }
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, VariableDef& x) {
  return f(caf::meta::type_name("troupe.variable_def"), x.name, x.shard, x.row_offset, x.shape,
           x.init_kind, x.init_value, x.seed, x.optimizer, x.learning_rate, x.dynamic, x.min_count,
           x.admit_probability, x.ttl_steps, x.sketch_width, x.row_stride);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, RowsUpdate& x) {
  return f(caf::meta::type_name("troupe.rows_update"), x.rows, x.grads);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, RowsPage& x) {
  return f(caf::meta::type_name("troupe.rows_page"), x.keys, x.values, x.next);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ShardState& x) {
  return f(caf::meta::type_name("troupe.shard_state"), x.value, x.slots, x.iterations);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ShardCopy& x) {
  return f(caf::meta::type_name("troupe.shard_copy"), x.int_keys, x.ints, x.tensor_keys, x.tensors);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, Placement& x) {
  return f(caf::meta::type_name("troupe.placement"), x.def, x.ps_task, x.backups);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, PsItem& x) {
  return f(caf::meta::type_name("troupe.ps_item"), x.name, x.rows, x.tensor);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, PsRequest& x) {
  return f(caf::meta::type_name("troupe.ps_request"), x.op, x.tag, x.items, x.settled_below,
           x.epoch);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ClosureMsg& x) {
  return f(caf::meta::type_name("troupe.closure"), x.id, x.step, x.args, x.repeat, x.settled_below);
}

// Atoms of the protocol between processes (CAF 0.17: at most 10 characters).
using create_atom = caf::atom_constant<caf::atom("create")>;       // PS: create a shard
using pull_atom = caf::atom_constant<caf::atom("pull")>;           // PS: dense pull
using pull_rows_atom = caf::atom_constant<caf::atom("pullrows")>;  // PS: rows pull
using push_atom = caf::atom_constant<caf::atom("push")>;           // PS: dense gradient
using push_rows_atom = caf::atom_constant<caf::atom("pushrows")>;  // PS: rows gradient
using push_pull_atom = caf::atom_constant<caf::atom("pushpull")>;  // PS: gradient, new value
using batch_atom = caf::atom_constant<caf::atom("psbatch")>;       // PS: a PsRequest
using channel_atom = caf::atom_constant<caf::atom("channel")>;     // PS: tensor channel port
using run_atom = caf::atom_constant<caf::atom("run")>;             // worker: run a closure
using vars_atom = caf::atom_constant<caf::atom("vars")>;           // worker: variable placement
using dataset_atom = caf::atom_constant<caf::atom("dataset")>;     // worker: build a dataset
using stats_atom = caf::atom_constant<caf::atom("stats")>;         // any: counters
using shutdown_atom = caf::atom_constant<caf::atom("shutdown")>;   // node: stop serving
using snapshot_atom = caf::atom_constant<caf::atom("snapshot")>;   // PS: take a snapshot
using snapstep_atom = caf::atom_constant<caf::atom("snapstep")>;   // PS: copy the next shard
// PS: (refused, bool caf_port): a stranger was refused by the CAF port's gate, or the channel.
using refused_atom = caf::atom_constant<caf::atom("refused")>;
using state_atom = caf::atom_constant<caf::atom("shardstate")>;    // PS: a shard's state
using assign_atom = caf::atom_constant<caf::atom("assign")>;       // PS: set a shard's state
using rows_page_atom = caf::atom_constant<caf::atom("rowspage")>;  // PS: a page of a table's rows
using defs_atom = caf::atom_constant<caf::atom("psdefs")>;         // PS: the shards it holds
using cancel_atom = caf::atom_constant<caf::atom("cancel")>;       // worker control: cancel
// PS and worker control: (failover, epoch, [lost ps tasks], [rejoining ps tasks]): the
// placement's new epoch.
using failover_atom = caf::atom_constant<caf::atom("failover")>;
// PS: (psrejoin, [VariableDef]) -> ok: make these shards afresh, rejoining (keep updates).
using rejoin_shards_atom = caf::atom_constant<caf::atom("psrejoin")>;
// PS: (shardcopy, key, epoch) -> ShardCopy: a whole shard, fenced at `epoch`.
using shard_copy_atom = caf::atom_constant<caf::atom("shardcopy")>;
// PS: (install, key, ShardCopy) -> ok: a rejoining shard's copy.
using install_atom = caf::atom_constant<caf::atom("install")>;
// PS: (pslease, int64 ms): the chief's word that this task serves for `ms` more (sent with
// every poll when shards are replicated); past it the task refuses workers' requests.
using lease_atom = caf::atom_constant<caf::atom("pslease")>;

// Atoms of messages local to one process, never serialised: every atom of Troupe is in
// this file, so that no two messages one actor handles can share an atom by accident.
// A supervisor (actors/supervisor.hpp).
using which_atom = caf::atom_constant<caf::atom("which")>;      // (which, name) -> the child
using restart_atom = caf::atom_constant<caf::atom("restart")>;  // to itself: start children again
// A worker's dataset_iterator: (next, n) -> the next n batches.
using next_atom = caf::atom_constant<caf::atom("next")>;
// The chief's coordinator and its proxies (actors/chief_protocol.hpp says what each carries).
using ready_atom = caf::atom_constant<caf::atom("wready")>;        // proxy: worker takes closures
using lost_atom = caf::atom_constant<caf::atom("wlost")>;          // proxy: worker lost, closures
using back_atom = caf::atom_constant<caf::atom("wback")>;          // proxy: closures never sent
using done_atom = caf::atom_constant<caf::atom("wdone")>;          // proxy: closure answered
using failed_atom = caf::atom_constant<caf::atom("wfailed")>;      // proxy: the step's own error
using ps_down_atom = caf::atom_constant<caf::atom("psdown")>;      // PS proxy: down
using ps_up_atom = caf::atom_constant<caf::atom("psup")>;          // PS proxy: back
using ps_failed_atom = caf::atom_constant<caf::atom("psfailed")>;  // PS proxy: gone for good
using tick_atom = caf::atom_constant<caf::atom("tick")>;           // timers of each actor
using rejoin_atom = caf::atom_constant<caf::atom("rejoin")>;
using forget_atom = caf::atom_constant<caf::atom("forget")>;
using deadline_atom = caf::atom_constant<caf::atom("deadline")>;
using resume_atom = caf::atom_constant<caf::atom("resume")>;
using watchdog_atom = caf::atom_constant<caf::atom("watchdog")>;
using task_down_atom = caf::atom_constant<caf::atom("taskdown")>;  // a proxy's task went down
using ps_join_atom = caf::atom_constant<caf::atom("psjoin")>;      // PS proxy: lost task answers
using rebuilt_atom = caf::atom_constant<caf::atom("rebuilt")>;     // a rejoin's copies are in

/// The CAF error category of Troupe's core::Errc codes.
inline constexpr caf::atom_value error_category = caf::atom("troupe");

/// A core::Error as a caf::error (code, category "troupe", message as context).
caf::error to_caf(const core::Error& e);
/// A caf::error as a core::Error: Troupe's own codes keep theirs, CAF's own errors map to
/// `unavailable` (peer gone, request timed out) or `internal`.
core::Error from_caf(const caf::error& e);

/// Registers every message type of the `troupe` type ID block (below) with cfg, and returns
/// it. The one place that instantiates the registrations: they cost seconds of compile
/// time per file that does.
caf::actor_system_config& add_wire_types(caf::actor_system_config& cfg);

}  // namespace troupe::net

CAF_BEGIN_TYPE_ID_BLOCK(troupe, caf::first_custom_type_id)
CAF_ADD_TYPE_ID(troupe, (troupe::net::WireTensor))
CAF_ADD_TYPE_ID(troupe, (troupe::net::VariableDef))
CAF_ADD_TYPE_ID(troupe, (troupe::net::RowsUpdate))
CAF_ADD_TYPE_ID(troupe, (troupe::net::Placement))
CAF_ADD_TYPE_ID(troupe, (troupe::net::ClosureMsg))
CAF_ADD_TYPE_ID(troupe, (std::vector<troupe::net::Placement>))
CAF_ADD_TYPE_ID(troupe, (std::vector<int64_t>))
CAF_ADD_TYPE_ID(troupe, (std::vector<char>))
CAF_ADD_TYPE_ID(troupe, (troupe::net::PsItem))
CAF_ADD_TYPE_ID(troupe, (troupe::net::PsRequest))
CAF_ADD_TYPE_ID(troupe, (std::vector<troupe::net::PsItem>))
CAF_ADD_TYPE_ID(troupe, (troupe::net::ShardState))
CAF_ADD_TYPE_ID(troupe, (std::vector<troupe::net::WireTensor>))
CAF_ADD_TYPE_ID(troupe, (troupe::net::RowsPage))
CAF_ADD_TYPE_ID(troupe, (std::vector<troupe::net::VariableDef>))
CAF_ADD_TYPE_ID(troupe, (std::vector<int32_t>))
CAF_ADD_TYPE_ID(troupe, (troupe::net::ShardCopy))
CAF_END_TYPE_ID_BLOCK(troupe)
