#include "actors/ps_shard_state.hpp"

#include <cstring>

#include "core/partitioner.hpp"

namespace troupe::actors {

using core::Errc;
using core::make_error;

namespace {

bool same_def(const net::VariableDef& a, const net::VariableDef& b) {
  return a.name == b.name && a.shard == b.shard && a.row_offset == b.row_offset &&
         a.shape == b.shape && a.init_kind == b.init_kind && a.init_value == b.init_value &&
         a.seed == b.seed && a.optimizer == b.optimizer && a.learning_rate == b.learning_rate;
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
  int64_t elements = 1;
  for (int64_t d : def.shape) {
    if (d < 0 || (d > 0 && elements > (int64_t{1} << 34) / d))
      return reject(make_error(Errc::invalid_argument,
                               "variable '" + def.name + "' has an implausible shape"));
    elements *= d;
  }
  if (def.init_kind < 0 ||
      def.init_kind > static_cast<int32_t>(core::Initializer::Kind::random_normal))
    return reject(
        make_error(Errc::invalid_argument, "variable '" + def.name + "': unknown initializer"));
  auto opt = core::make_optimizer(def.optimizer, def.learning_rate);
  if (!opt) return reject(opt.error());
  Shard s;
  s.def = def;
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
  ++counters_.pulls;
  return net::WireTensor::from((*s)->value);
}

core::Expected<net::ShardState> PsShardState::state(const std::string& name) {
  auto s = find(name);
  if (!s) return s.error();
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
  return apply_once(closure_id, settled_below, name, grad, [&](Shard& sh) {
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
    return sh.optimizer->apply_sparse(sh.value, update.rows, update.grads.view(), sh.slots);
  });
}

core::Expected<std::vector<net::PsItem>> PsShardState::handle(net::PsRequest& request) {
  if (request.op < 1 || request.op > net::max_ps_op)
    return reject(
        make_error(Errc::invalid_argument, "unknown PS op " + std::to_string(request.op)));
  std::vector<net::PsItem> out(request.items.size());
  for (size_t i = 0; i < request.items.size(); ++i) {
    net::PsItem& item = request.items[i];
    out[i].name = item.name;
    core::Expected<net::WireTensor> value = net::WireTensor{};
    core::Expected<bool> applied = true;
    switch (static_cast<net::PsOp>(request.op)) {
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
  return out;
}

// Snapshot layout: per variable, tensors "<var>" (value) and "<var>/slot<i>"; ints
// "<var>/def" (shard, row offset, initializer kind, initializer value bits, seed, learning
// rate bits, then the shape), "<var>/optimizer" (its name's bytes), "<var>/iterations",
// "<var>/applied_tags" (AppliedTags::to_ints); and "updates_applied".
namespace {

int64_t float_bits(float f) {
  uint32_t u = 0;
  std::memcpy(&u, &f, sizeof u);
  return static_cast<int64_t>(u);
}

float bits_float(int64_t v) {
  const auto u = static_cast<uint32_t>(v);
  float f = 0;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

core::Error incomplete(const std::string& name, const std::string& what) {
  return make_error(Errc::data_loss, "PS snapshot of '" + name + "': " + what);
}

}  // namespace

core::Checkpoint PsShardState::snapshot() const {
  core::Checkpoint c;
  for (const auto& [name, shard] : vars_)
    snapshot_shard(name, c);
  snapshot_counters(c);
  return c;
}

std::vector<std::string> PsShardState::shard_names() const {
  std::vector<std::string> names;
  for (const auto& [name, shard] : vars_)
    names.push_back(name);
  return names;
}

bool PsShardState::snapshot_shard(const std::string& name, core::Checkpoint& c) const {
  auto it = vars_.find(name);
  if (it == vars_.end()) return false;
  const Shard& shard = it->second;
  const net::VariableDef& d = shard.def;
  std::vector<int64_t> def{d.shard,
                           d.row_offset,
                           d.init_kind,
                           float_bits(d.init_value),
                           static_cast<int64_t>(d.seed),
                           float_bits(d.learning_rate)};
  def.insert(def.end(), d.shape.begin(), d.shape.end());
  c.ints[name + "/def"] = std::move(def);
  c.ints[name + "/optimizer"] = core::text_ints(d.optimizer);
  c.tensors.insert_or_assign(name, shard.value);
  for (size_t i = 0; i < shard.slots.slots.size(); ++i)
    c.tensors.insert_or_assign(name + "/slot" + std::to_string(i), shard.slots.slots[i]);
  c.ints[name + "/iterations"] = {shard.slots.iterations};
  c.ints[name + "/applied_tags"] = shard.applied.to_ints();
  return true;
}

void PsShardState::snapshot_counters(core::Checkpoint& c) const {
  c.ints["updates_applied"] = {counters_.updates_applied};
}

core::Expected<PsShardState> PsShardState::from_snapshot(const core::Checkpoint& ckpt) {
  auto count = ckpt.ints.find("updates_applied");
  if (count == ckpt.ints.end() || count->second.size() != 1)
    return make_error(Errc::data_loss, "PS snapshot has no update count");
  PsShardState st;
  const std::string suffix = "/def";
  for (const auto& [key, def] : ckpt.ints) {
    if (key.size() <= suffix.size() ||
        key.compare(key.size() - suffix.size(), suffix.size(), suffix) != 0)
      continue;
    const std::string name = key.substr(0, key.size() - suffix.size());  // "<var>#<shard>"
    if (def.size() < 6) return incomplete(name, "short definition");
    net::VariableDef d;
    d.shard = static_cast<int32_t>(def[0]);
    const std::string tail = "#" + std::to_string(d.shard);
    if (name.size() <= tail.size() || name.compare(name.size() - tail.size(), tail.size(), tail))
      return incomplete(name, "its key does not end in its shard number");
    d.name = name.substr(0, name.size() - tail.size());
    d.row_offset = def[1];
    d.init_kind = static_cast<int32_t>(def[2]);
    d.init_value = bits_float(def[3]);
    d.seed = static_cast<uint64_t>(def[4]);
    d.learning_rate = bits_float(def[5]);
    d.shape.assign(def.begin() + 6, def.end());
    auto opt = ckpt.ints.find(name + "/optimizer");
    if (opt == ckpt.ints.end()) return incomplete(name, "no optimizer");
    auto opt_name = core::ints_text(opt->second);
    if (!opt_name) return incomplete(name, "bad optimizer name");
    d.optimizer = std::move(*opt_name);
    if (auto created = st.create(d); !created) return incomplete(name, created.error().message);
    Shard& shard = st.vars_.at(name);
    auto value = ckpt.tensors.find(name);
    if (value == ckpt.tensors.end() || !(value->second.shape() == shard.value.shape()))
      return incomplete(name, "value missing or of another shape");
    shard.value = value->second;
    for (size_t i = 0; i < shard.slots.slots.size(); ++i) {
      auto slot = ckpt.tensors.find(name + "/slot" + std::to_string(i));
      if (slot == ckpt.tensors.end() || !(slot->second.shape() == shard.slots.slots[i].shape()))
        return incomplete(name, "slot " + std::to_string(i) + " missing or of another shape");
      shard.slots.slots[i] = slot->second;
    }
    auto it = ckpt.ints.find(name + "/iterations");
    auto applied = ckpt.ints.find(name + "/applied_tags");
    if (it == ckpt.ints.end() || it->second.size() != 1 || applied == ckpt.ints.end())
      return incomplete(name, "no iteration count or applied closure tags");
    shard.slots.iterations = it->second[0];
    auto tags = AppliedTags::from_ints(applied->second);
    if (!tags) return incomplete(name, tags.error().message);
    shard.applied = std::move(*tags);
  }
  st.counters_.updates_applied = count->second[0];
  st.restored_from_ = count->second[0];
  return st;
}

size_t PsShardState::applied_tags() const {
  size_t n = 0;
  for (const auto& [name, shard] : vars_)
    n += shard.applied.size();
  return n;
}

}  // namespace troupe::actors
