#include "actors/ps_shard_state.hpp"

#include <cmath>
#include <cstring>

#include "core/optimizer.hpp"
#include "core/optimizer_config.hpp"
#include "core/partitioner.hpp"

namespace troupe::actors {

using core::Errc;
using core::make_error;

namespace {

bool same_def(const net::VariableDef& a, const net::VariableDef& b) {
  return a.name == b.name && a.shard == b.shard && a.row_offset == b.row_offset &&
         a.shape == b.shape && a.init_kind == b.init_kind && a.init_value == b.init_value &&
         a.seed == b.seed && a.optimizer == b.optimizer && a.learning_rate == b.learning_rate &&
         a.dynamic == b.dynamic && a.min_count == b.min_count &&
         a.admit_probability == b.admit_probability && a.ttl_steps == b.ttl_steps &&
         a.sketch_width == b.sketch_width && a.row_stride == b.row_stride;
}

core::DynamicTableOptions table_options(const net::VariableDef& def) {
  core::DynamicTableOptions o;
  o.width = def.shape.size() == 2 ? def.shape[1] : 0;
  o.max_rows = def.shape.size() == 2 ? def.shape[0] : 0;
  o.min_count = def.min_count;
  o.admit_probability = def.admit_probability;
  o.ttl_steps = def.ttl_steps;
  if (def.sketch_width > 0) {
    o.sketch_width = def.sketch_width;
  } else if (o.max_rows > 0) {
    // Sized by the cap: 4 x 2 bytes per row the shard may hold (as many counters per hash
    // as rows), between 2^12 and 2^20 counters.
    o.sketch_width = 1 << 12;
    while (o.sketch_width < o.max_rows && o.sketch_width < (1 << 20))
      o.sketch_width *= 2;
  }
  o.init = core::Initializer{static_cast<core::Initializer::Kind>(def.init_kind), def.init_value,
                             def.seed};
  return o;
}

core::Error dynamic_misuse(const std::string& name, const std::string& what) {
  return make_error(Errc::invalid_argument, "'" + name + "' is a dynamic table: " + what);
}

}  // namespace

core::Error PsShardState::reject(core::Error e) {
  ++counters_.requests_rejected;
  return e;
}

core::Status PsShardState::create(const net::VariableDef& def) {
  const std::string key = net::shard_key(def);
  if (auto it = vars_.find(key); it != vars_.end()) {
    if (same_def(it->second.def, def)) return {};
    return reject(
        make_error(Errc::invalid_argument,
                   "variable shard '" + key + "' already exists with another definition"));
  }
  if (def.name.empty() || def.shape.size() > static_cast<size_t>(core::Shape::max_rank))
    return reject(make_error(Errc::invalid_argument, "bad variable definition '" + def.name + "'"));
  // A shard's first row in its variable: no variable has 2^40 rows (a shard holds at most
  // 2^34 elements).
  if (def.shard < 0 || def.row_offset < 0 || def.row_offset > (int64_t{1} << 40))
    return reject(make_error(Errc::invalid_argument,
                             "variable '" + def.name + "': shard " + std::to_string(def.shard) +
                                 " at row " + std::to_string(def.row_offset) + " is out of range"));
  // Interleaved: the stride is the shard count, which the partitioners bound well below 2^20.
  if (def.row_stride < 1 || def.row_stride > (int64_t{1} << 20) ||
      (def.row_stride > 1 && (def.dynamic || def.row_offset >= def.row_stride)))
    return reject(make_error(Errc::invalid_argument,
                             "variable '" + def.name + "': shard " + std::to_string(def.shard) +
                                 " with row stride " + std::to_string(def.row_stride) +
                                 " and first row " + std::to_string(def.row_offset)));
  int64_t elements = 1;
  for (int64_t d : def.shape) {
    if (d < 0 || (d > 0 && elements > (int64_t{1} << 34) / d))
      return reject(make_error(Errc::invalid_argument,
                               "variable '" + def.name + "' has an implausible shape"));
    elements *= d;
  }
  if (def.init_kind < 0 ||
      def.init_kind > static_cast<int32_t>(core::Initializer::Kind::truncated_normal))
    return reject(
        make_error(Errc::invalid_argument, "variable '" + def.name + "': unknown initializer"));
  auto opt = core::make_optimizer_from(def.optimizer, def.learning_rate);
  if (!opt) return reject(opt.error());
  Shard s;
  s.def = def;
  if (def.dynamic) {
    const auto o = table_options(def);
    if (def.shape.size() != 2)
      return reject(dynamic_misuse(def.name, "its shape must be {max rows, width}"));
    if (auto st = o.check(); !st)
      return reject(make_error(Errc::invalid_argument, def.name + ": " + st.error().message));
    s.table = std::make_unique<core::DynamicTable>(o, std::move(*opt));
    s.table->track_touched(track_deltas_);
    vars_.emplace(key, std::move(s));
    ++counters_.variables;
    return {};
  }
  const core::Shape shape(def.shape);
  // Each shard seeds its initializer from (seed, shard) so shards differ.
  s.value = core::initialize(
      shape, core::Initializer{static_cast<core::Initializer::Kind>(def.init_kind), def.init_value,
                               def.seed * 1000003u + static_cast<uint64_t>(def.shard)});
  s.optimizer = std::move(*opt);
  s.slots = s.optimizer->make_slots(shape);
  vars_.emplace(key, std::move(s));
  ++counters_.variables;
  return {};
}

core::Expected<const PsShardState::Shard*> PsShardState::lookup(const std::string& name) const {
  auto it = vars_.find(name);
  if (it == vars_.end())
    return make_error(Errc::not_found, "no variable '" + name + "' on this shard");
  if (it->second.kept)
    return make_error(Errc::unavailable,
                      "'" + name + "' is rejoining on this task: it serves once its copy is in");
  return &it->second;
}

core::Expected<PsShardState::Shard*> PsShardState::find(const std::string& name) {
  auto s = lookup(name);
  if (!s) return reject(s.error());
  return const_cast<Shard*>(*s);
}

core::Expected<net::WireTensor> PsShardState::pull(const std::string& name) {
  auto s = find(name);
  if (!s) return s.error();
  if ((*s)->table) return reject(dynamic_misuse(name, "read its rows by key"));
  ++counters_.pulls;
  return net::WireTensor::from((*s)->value);
}

core::Expected<net::ShardState> PsShardState::state(const std::string& name) {
  auto s = find(name);
  if (!s) return s.error();
  if ((*s)->table)
    return reject(dynamic_misuse(name, "a chief's backup does not hold it (PS snapshots do)"));
  net::ShardState out;
  out.value = net::WireTensor::from((*s)->value);
  for (const auto& slot : (*s)->slots.slots)
    out.slots.push_back(net::WireTensor::from(slot));
  out.iterations = (*s)->slots.iterations;
  return out;
}

core::Status PsShardState::assign(const std::string& name, const net::ShardState& state) {
  auto s = find(name);
  if (!s) return s.error();
  Shard& shard = **s;
  if (shard.table)
    return reject(dynamic_misuse(name, "a chief's backup does not hold it (PS snapshots do)"));
  auto fits = [](const net::WireTensor& t, const core::Tensor& like) {
    return t.consistent() && t.dims == like.shape().to_vector();
  };
  auto refuse = [&](const std::string& why) {
    ++counters_.requests_rejected;
    return make_error(Errc::invalid_argument, "assigning '" + name + "': " + why);
  };
  if (!fits(state.value, shard.value)) return refuse("value of another shape");
  if (state.slots.size() != shard.slots.slots.size())
    return refuse(std::to_string(state.slots.size()) + " optimizer slots, the shard has " +
                  std::to_string(shard.slots.slots.size()));
  for (size_t i = 0; i < state.slots.size(); ++i)
    if (!fits(state.slots[i], shard.slots.slots[i]))
      return refuse("slot " + std::to_string(i) + " of another shape");
  if (state.iterations < 0) return refuse("negative iteration count");
  std::copy(state.value.data.begin(), state.value.data.end(), shard.value.data());
  for (size_t i = 0; i < state.slots.size(); ++i)
    std::copy(state.slots[i].data.begin(), state.slots[i].data.end(), shard.slots.slots[i].data());
  shard.slots.iterations = state.iterations;
  return {};
}

core::Expected<net::WireTensor> PsShardState::pull_rows(const std::string& name,
                                                        const std::vector<int64_t>& rows) {
  auto out = rows_of(name, rows);
  if (!out) return reject(out.error());
  ++counters_.pulls;
  return out;
}

core::Expected<net::WireTensor> PsShardState::rows_of(const std::string& name,
                                                      const std::vector<int64_t>& rows) const {
  auto s = lookup(name);
  if (!s) return s.error();
  if (const core::DynamicTable* t = (*s)->table.get()) {
    net::WireTensor out;
    out.dims = {static_cast<int64_t>(rows.size()), t->width()};
    out.data.resize(rows.size() * static_cast<size_t>(t->width()));
    t->lookup(rows.data(), rows.size(), out.data.data());
    return out;
  }
  const core::Tensor& v = (*s)->value;
  if (v.shape().rank() < 1) return make_error(Errc::invalid_argument, "'" + name + "' has no rows");
  const int64_t width = v.shape().row_size();
  for (int64_t r : rows)
    if (r < 0 || r >= v.shape()[0])
      return make_error(Errc::out_of_range, "row " + std::to_string(r) + " outside '" + name +
                                                "' shard of " + std::to_string(v.shape()[0]) +
                                                " rows");
  net::WireTensor out;
  out.dims = v.shape().to_vector();
  out.dims[0] = static_cast<int64_t>(rows.size());
  out.data.resize(rows.size() * static_cast<size_t>(width));
  // Rows of a big table are scattered in memory: ask for a few rows ahead so their cache
  // misses overlap instead of queueing one after another.
  constexpr size_t ahead = 8;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (i + ahead < rows.size()) __builtin_prefetch(v.data() + rows[i + ahead] * width);
    std::copy_n(v.data() + rows[i] * width, width,
                out.data.data() + static_cast<int64_t>(i) * width);
  }
  return out;
}

core::Expected<net::RowsPage> PsShardState::rows_page(const std::string& name, int64_t from,
                                                      int64_t limit, int32_t min_count) const {
  auto s = lookup(name);
  if (!s) return s.error();
  const core::DynamicTable* t = (*s)->table.get();
  if (t == nullptr)
    return make_error(Errc::invalid_argument,
                      "'" + name + "' is not a dynamic table: pull it whole");
  if (limit < 1) return make_error(Errc::invalid_argument, "a page of fewer than one row");
  constexpr int64_t max_page_bytes = 16 << 20;
  limit = std::min(limit, std::max<int64_t>(1, max_page_bytes / (4 * t->width())));
  net::RowsPage page;
  page.next = t->page(from, limit, static_cast<uint32_t>(std::max(min_count, 0)), page.keys,
                      page.values.data);
  page.values.dims = {static_cast<int64_t>(page.keys.size()), t->width()};
  return page;
}

core::Expected<std::vector<net::PsItem>> PsShardState::read(const net::PsRequest& request) const {
  const auto op = static_cast<net::PsOp>(request.op);
  if (op != net::PsOp::pull && op != net::PsOp::pull_rows)
    return make_error(Errc::invalid_argument,
                      "PS op " + std::to_string(request.op) + " is not a read");
  std::vector<net::PsItem> out(request.items.size());
  for (size_t i = 0; i < request.items.size(); ++i) {
    const net::PsItem& item = request.items[i];
    out[i].name = item.name;
    core::Expected<net::WireTensor> value = net::WireTensor{};
    if (op == net::PsOp::pull) {
      auto s = lookup(item.name);
      if (!s) return s.error();
      if ((*s)->table) return dynamic_misuse(item.name, "read its rows by key");
      value = net::WireTensor::from((*s)->value);
    } else {
      value = rows_of(item.name, item.rows);
    }
    if (!value) return value.error();
    out[i].tensor = std::move(*value);
  }
  return out;
}

template <class Apply>
core::Expected<bool> PsShardState::apply_once(uint64_t closure_id, uint64_t settled_below,
                                              const std::string& name, const net::WireTensor& grad,
                                              Apply apply) {
  auto s = find(name);
  if (!s) return s.error();
  Shard& sh = **s;
  if (!grad.consistent())
    return reject(make_error(Errc::invalid_argument, "inconsistent gradient for '" + name + "'"));
  sh.applied.settle(closure_id, settled_below);
  if (!sh.applied.fresh(closure_id)) {
    ++counters_.updates_duplicate;
    return false;
  }
  // A rejected update does not consume its closure id: a corrected retry may still apply.
  if (auto st = apply(sh); !st) return reject(st.error());
  sh.applied.insert(closure_id);
  ++counters_.updates_applied;
  return true;
}

core::Expected<bool> PsShardState::push(uint64_t closure_id, const std::string& name,
                                        const net::WireTensor& grad, uint64_t settled_below) {
  return apply_once(closure_id, settled_below, name, grad, [&](Shard& sh) -> core::Status {
    if (sh.table) return dynamic_misuse(name, "push gradients of its rows by key");
    return sh.optimizer->apply_dense(sh.value, grad.view(), sh.slots);
  });
}

core::Expected<net::WireTensor> PsShardState::push_pull(uint64_t closure_id,
                                                        const std::string& name,
                                                        const net::WireTensor& grad,
                                                        uint64_t settled_below) {
  auto applied = push(closure_id, name, grad, settled_below);
  if (!applied) return applied.error();
  return pull(name);
}

core::Expected<bool> PsShardState::push_rows(uint64_t closure_id, const std::string& name,
                                             const net::RowsUpdate& update,
                                             uint64_t settled_below) {
  return apply_once(closure_id, settled_below, name, update.grads, [&](Shard& sh) {
    if (sh.table) return sh.table->apply(update.rows, update.grads.view());
    return sh.optimizer->apply_sparse(sh.value, update.rows, update.grads.view(), sh.slots);
  });
}

core::Expected<std::vector<net::PsItem>> PsShardState::handle(net::PsRequest& request) {
  if (request.op < 1 || request.op > net::max_ps_op)
    return reject(
        make_error(Errc::invalid_argument, "unknown PS op " + std::to_string(request.op)));
  std::vector<net::PsItem> out(request.items.size());
  net::PsLoad load = net::load_in(request);
  for (size_t i = 0; i < request.items.size(); ++i) {
    net::PsItem& item = request.items[i];
    out[i].name = item.name;
    core::Expected<net::WireTensor> value = net::WireTensor{};
    core::Expected<bool> applied = true;
    const auto op = static_cast<net::PsOp>(request.op);
    if (op != net::PsOp::pull && op != net::PsOp::pull_rows) {
      auto it = vars_.find(item.name);
      if (it != vars_.end() && it->second.kept) {
        // Rejoining: kept for install(), acknowledged (the worker drops a copy's reply).
        if (!item.tensor.consistent())
          return reject(
              make_error(Errc::invalid_argument, "inconsistent gradient for '" + item.name + "'"));
        it->second.kept->push_back({request.op, request.tag, request.settled_below, item});
        continue;
      }
    }
    switch (op) {
      case net::PsOp::pull:
        value = pull(item.name);
        break;
      case net::PsOp::pull_rows:
        value = pull_rows(item.name, item.rows);
        break;
      case net::PsOp::push:
        applied = push(request.tag, item.name, item.tensor, request.settled_below);
        break;
      case net::PsOp::push_pull:
        value = push_pull(request.tag, item.name, item.tensor, request.settled_below);
        break;
      case net::PsOp::push_rows: {
        net::RowsUpdate u{std::move(item.rows), std::move(item.tensor)};
        applied = push_rows(request.tag, item.name, u, request.settled_below);
        break;
      }
    }
    if (!value) return value.error();
    if (!applied) return applied.error();
    out[i].tensor = std::move(*value);
  }
  net::add_load_out(out, load);
  counters_.load.rows_in += load.rows_in;
  counters_.load.bytes_in += load.bytes_in;
  counters_.load.rows_out += load.rows_out;
  counters_.load.bytes_out += load.bytes_out;
  return out;
}

PsShardState::TableTotals PsShardState::table_totals() const {
  TableTotals t;
  for (const auto& [name, shard] : vars_) {
    if (!shard.table) continue;
    const auto& c = shard.table->counters();
    t.rows += shard.table->rows();
    t.admitted += c.admitted;
    t.evicted += c.evicted_ttl + c.evicted_cap;
    t.grads_dropped += c.grads_dropped;
    t.bytes += shard.table->memory_bytes();
  }
  return t;
}

std::vector<net::VariableDef> PsShardState::definitions() const {
  std::vector<net::VariableDef> out;
  out.reserve(vars_.size());
  for (const auto& [name, shard] : vars_)
    if (!shard.kept) out.push_back(shard.def);  // a rejoining shard is not here yet
  return out;
}

core::Status PsShardState::rejoin(const std::vector<net::VariableDef>& defs) {
  for (const auto& d : defs) {
    const std::string key = net::shard_key(d);
    if (vars_.erase(key) > 0) --counters_.variables;
    if (auto st = create(d); !st) return st;
    vars_.at(key).kept = std::make_unique<std::vector<Kept>>();
  }
  return {};
}

core::Expected<core::Checkpoint> PsShardState::copy_shard(const std::string& key) const {
  auto s = lookup(key);
  if (!s) return s.error();
  core::Checkpoint c;
  write_shard(key, c, false);
  return c;
}

core::Status PsShardState::install(const std::string& key, const core::Checkpoint& copy) {
  auto it = vars_.find(key);
  if (it == vars_.end() || !it->second.kept)
    return make_error(Errc::invalid_argument, "'" + key + "' is not rejoining on this task");
  auto def = copy.ints.find(key + "/def");
  if (def == copy.ints.end())
    return make_error(Errc::data_loss, "the copy of '" + key + "' has no definition");
  // Loaded into a fresh shard of the same definition; the rejoining one stays as it was
  // if the copy does not fit.
  PsShardState fresh;
  fresh.track_deltas(track_deltas_);
  if (auto st = fresh.create(it->second.def); !st) return st;
  if (auto st = fresh.load_shard(key, def->second, copy, false); !st) return st;
  auto kept = std::move(it->second.kept);
  it->second = std::move(fresh.vars_.at(key));
  for (auto& k : *kept) {
    net::PsRequest r;
    r.op = k.op;
    r.tag = k.tag;
    r.settled_below = k.settled_below;
    r.items.push_back(std::move(k.item));
    (void)handle(r);  // an update the copy applied is a duplicate by its tag
  }
  return {};
}

size_t PsShardState::rejoining() const {
  size_t n = 0;
  for (const auto& [name, shard] : vars_)
    if (shard.kept) ++n;
  return n;
}

size_t PsShardState::applied_tags() const {
  size_t n = 0;
  for (const auto& [name, shard] : vars_)
    n += shard.applied.size();
  return n;
}

net::ShardCopy to_shard_copy(const core::Checkpoint& c) {
  net::ShardCopy out;
  for (const auto& [k, v] : c.ints) {
    out.int_keys.push_back(k);
    out.ints.push_back(v);
  }
  for (const auto& [k, t] : c.tensors) {
    out.tensor_keys.push_back(k);
    out.tensors.push_back(net::WireTensor::from(t.view()));
  }
  return out;
}

core::Expected<core::Checkpoint> from_shard_copy(const net::ShardCopy& c) {
  if (c.int_keys.size() != c.ints.size() || c.tensor_keys.size() != c.tensors.size())
    return make_error(Errc::data_loss, "a shard copy whose keys and entries do not pair up");
  core::Checkpoint out;
  for (size_t i = 0; i < c.ints.size(); ++i)
    out.ints[c.int_keys[i]] = c.ints[i];
  for (size_t i = 0; i < c.tensors.size(); ++i) {
    if (!c.tensors[i].consistent())
      return make_error(Errc::data_loss,
                        "a shard copy's tensor '" + c.tensor_keys[i] + "' is inconsistent");
    out.tensors.insert_or_assign(c.tensor_keys[i], core::Tensor::from_view(c.tensors[i].view()));
  }
  return out;
}

}  // namespace troupe::actors
