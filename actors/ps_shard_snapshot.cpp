// PsShardState's snapshots: the full copy, the delta copy, and a state rebuilt from them.
#include <cmath>
#include <cstring>
#include <limits>
#include <set>

#include "actors/ps_shard_state.hpp"

namespace troupe::actors {

using core::Errc;
using core::make_error;
// Snapshot layout: per variable, tensors "<var>" (value) and "<var>/slot<i>"; ints
// "<var>/def" (shard, row offset, initializer kind, initializer value bits, seed, learning
// rate bits, then the shape), "<var>/optimizer" (its name's bytes), "<var>/iterations",
// "<var>/applied_tags" (AppliedTags::to_ints); and "updates_applied". A dynamic table's
// shard has instead of the value and slots: tensor "<var>" [rows, width x (1 + slots)] (each
// live row's value then its slots), ints "<var>/keys" (a key a row), "<var>/row_meta"
// (occurrence count and last step, two a row) and "<var>/dynamic" (min count, admission
// probability bits, ttl steps, sketch width, the table's step and iterations). The
// admission sketch is not saved: keys not yet admitted start counting again. A shard of
// interleaved rows has "<var>/row_stride" (its row stride), absent when it is 1.
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

// The first element of `t` that is NaN or infinite; -1 when every one is finite.
int64_t first_not_finite(const core::Tensor& t) {
  for (int64_t i = 0; i < t.size(); ++i)
    if (!std::isfinite(t.data()[i])) return i;
  return -1;
}

core::Error incomplete(const std::string& name, const std::string& what) {
  return make_error(Errc::data_loss, "PS snapshot of '" + name + "': " + what);
}

// A dynamic shard's rows from its snapshot entries, checked against each other: as many
// keys as rows, two metadata ints a row, rows of the table's stride, every value finite.
// In a delta, the keys evicted ("<var>/evicted") go first and a row replaces the key's row.
core::Status restore_rows(const core::Checkpoint& ckpt, const std::string& name, int64_t step,
                          int64_t iterations, core::DynamicTable& table, bool delta) {
  auto rows = ckpt.tensors.find(name);
  auto keys = ckpt.ints.find(name + "/keys");
  auto meta = ckpt.ints.find(name + "/row_meta");
  if (rows == ckpt.tensors.end() || keys == ckpt.ints.end() || meta == ckpt.ints.end())
    return incomplete(name, "rows, keys or row metadata missing");
  const core::Tensor& r = rows->second;
  const auto n = static_cast<int64_t>(keys->second.size());
  if (r.shape().rank() != 2 || r.shape()[0] != n || r.shape()[1] != table.stride() ||
      static_cast<int64_t>(meta->second.size()) != 2 * n)
    return incomplete(name, std::to_string(n) + " keys do not match rows of shape " +
                                r.shape().to_string() + " and " +
                                std::to_string(meta->second.size()) + " metadata ints");
  if (step < 0 || iterations < 0) return incomplete(name, "a negative clock");
  if (delta) {
    auto evicted = ckpt.ints.find(name + "/evicted");
    if (evicted == ckpt.ints.end()) return incomplete(name, "a delta without its evicted keys");
    for (int64_t key : evicted->second)
      table.erase(key);
  }
  if (auto bad = first_not_finite(r); bad >= 0)
    return incomplete(name,
                      "a value that is not finite in row " + std::to_string(bad / table.stride()));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t count = meta->second[static_cast<size_t>(2 * i)];
    const int64_t last = meta->second[static_cast<size_t>(2 * i + 1)];
    if (count < 1 || count > 0xffffffffll || last < 0 || last > 0xffffffffll)
      return incomplete(name, "bad metadata of row " + std::to_string(i));
    if (!delta && table.contains(keys->second[static_cast<size_t>(i)]))
      return incomplete(name,
                        "key " + std::to_string(keys->second[static_cast<size_t>(i)]) + " twice");
    if (auto st = table.insert(keys->second[static_cast<size_t>(i)], r.data() + i * table.stride(),
                               static_cast<uint32_t>(count), static_cast<uint32_t>(last));
        !st)
      return incomplete(name, st.error().message);
  }
  table.set_clock(step, iterations);
  return {};
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
  return write_shard(name, c, false);
}

bool PsShardState::snapshot_shard_delta(const std::string& name, core::Checkpoint& c) const {
  return write_shard(name, c, true);
}

void PsShardState::track_deltas(bool on) {
  track_deltas_ = on;
  for (auto& [name, shard] : vars_)
    if (shard.table) shard.table->track_touched(on);
}

void PsShardState::mark_copied(const std::string& name) {
  auto it = vars_.find(name);
  if (it != vars_.end() && it->second.table) it->second.table->clear_touched();
}

bool PsShardState::write_shard(const std::string& name, core::Checkpoint& c, bool delta) const {
  auto it = vars_.find(name);
  if (it == vars_.end() || it->second.kept) return false;  // a rejoining shard holds nothing yet
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
  if (d.row_stride != 1) c.ints[name + "/row_stride"] = {d.row_stride};  // interleaved rows
  c.ints[name + "/optimizer"] = core::text_ints(d.optimizer);
  c.ints[name + "/applied_tags"] = shard.applied.to_ints();
  if (const core::DynamicTable* t = shard.table.get()) {
    // A dynamic shard: its live rows (value and slots, one row a line), their keys, and
    // per row its occurrence count and last step; the table's clock.
    c.ints[name + "/dynamic"] = {d.min_count, float_bits(d.admit_probability),
                                 d.ttl_steps, d.sketch_width,
                                 t->step(),   t->iterations()};
    // A delta: the rows changed since the last copy (at most t->touched() of them: a row
    // changed and then evicted is only in the evicted keys).
    const int64_t most = delta ? t->touched() : t->rows();
    core::Tensor rows(core::Shape{most, t->stride()});
    std::vector<int64_t> keys, meta;
    keys.reserve(static_cast<size_t>(most));
    meta.reserve(static_cast<size_t>(2 * most));
    float* out = rows.data();
    auto put = [&](const core::DynamicRow& r) {
      keys.push_back(r.key);
      meta.push_back(r.count);
      meta.push_back(r.last);
      out = std::copy_n(r.data, t->stride(), out);
    };
    if (delta) {
      t->for_each_touched(put);
      c.ints[name + "/evicted"] = t->evicted_since();
      if (static_cast<int64_t>(keys.size()) < most) {
        core::Tensor fewer(core::Shape{static_cast<int64_t>(keys.size()), t->stride()});
        std::copy_n(rows.data(), fewer.size(), fewer.data());
        rows = std::move(fewer);
      }
    } else {
      t->for_each(put);
    }
    c.tensors.insert_or_assign(name, std::move(rows));
    c.ints[name + "/keys"] = std::move(keys);
    c.ints[name + "/row_meta"] = std::move(meta);
    c.ints[name + "/iterations"] = {t->iterations()};
    return true;
  }
  c.tensors.insert_or_assign(name, shard.value);
  for (size_t i = 0; i < shard.slots.slots.size(); ++i)
    c.tensors.insert_or_assign(name + "/slot" + std::to_string(i), shard.slots.slots[i]);
  c.ints[name + "/iterations"] = {shard.slots.iterations};
  return true;
}

void PsShardState::snapshot_counters(core::Checkpoint& c) const {
  c.ints["updates_applied"] = {counters_.updates_applied};
}

core::Expected<PsShardState> PsShardState::from_snapshot(const core::Checkpoint& ckpt) {
  if (ckpt.ints.count("delta") != 0)
    return make_error(Errc::data_loss, "a PS delta snapshot where a full one was expected");
  PsShardState st;
  if (auto loaded = st.load(ckpt, false); !loaded) return loaded.error();
  return st;
}

core::Status PsShardState::apply_delta(const core::Checkpoint& delta) {
  auto mark = delta.ints.find("delta");
  if (mark == delta.ints.end() || mark->second.size() != 2)
    return make_error(Errc::data_loss, "not a PS delta snapshot (no delta entry)");
  return load(delta, true);
}

core::Status PsShardState::load(const core::Checkpoint& ckpt, bool delta) {
  auto count = ckpt.ints.find("updates_applied");
  if (count == ckpt.ints.end() || count->second.size() != 1)
    return make_error(Errc::data_loss, "PS snapshot has no update count");
  if (count->second[0] < 0)
    return make_error(Errc::data_loss, "PS snapshot has a negative update count (" +
                                           std::to_string(count->second[0]) + ")");
  const std::string suffix = "/def";
  std::set<std::string> defined;
  for (const auto& [key, def] : ckpt.ints) {
    if (key.size() <= suffix.size() ||
        key.compare(key.size() - suffix.size(), suffix.size(), suffix) != 0)
      continue;
    const std::string name = key.substr(0, key.size() - suffix.size());  // "<var>#<shard>"
    if (auto st = load_shard(name, def, ckpt, delta); !st) return st;
    defined.insert(name);
  }
  // Every record belongs to a variable defined in this snapshot: one whose definition is
  // missing would otherwise be dropped, and the task would serve on without it.
  for (const auto& entry : ckpt.tensors)
    if (!known_record(entry.first, /*tensor=*/true, defined))
      return make_error(Errc::data_loss, "PS snapshot record '" + entry.first +
                                             "' belongs to no variable defined in it");
  for (const auto& entry : ckpt.ints)
    if (!known_record(entry.first, /*tensor=*/false, defined))
      return make_error(Errc::data_loss, "PS snapshot record '" + entry.first +
                                             "' belongs to no variable defined in it");
  PsShardState& st = *this;
  st.counters_.updates_applied = count->second[0];
  st.restored_from_ = count->second[0];
  return {};
}

bool PsShardState::known_record(const std::string& key, bool tensor,
                                const std::set<std::string>& defined) const {
  if (!tensor && (key == "updates_applied" || key == "delta")) return true;
  if (tensor && defined.count(key) != 0) return true;  // a variable's value (or rows)
  const auto slash = key.rfind('/');
  if (slash == std::string::npos || defined.count(key.substr(0, slash)) == 0) return false;
  const std::string name = key.substr(0, slash), what = key.substr(slash + 1);
  if (!tensor)
    return what == "def" || what == "optimizer" || what == "iterations" || what == "applied_tags" ||
           what == "keys" || what == "row_meta" || what == "dynamic" || what == "evicted" ||
           what == "row_stride";
  // "slot<i>": one of the slots its optimizer keeps (load_shard read each of those).
  const Shard& shard = vars_.at(name);
  for (size_t i = 0; i < shard.slots.slots.size() && !shard.table; ++i)
    if (what == "slot" + std::to_string(i)) return true;
  return false;
}

core::Status PsShardState::load_shard(const std::string& name, const std::vector<int64_t>& def,
                                      const core::Checkpoint& ckpt, bool delta) {
  PsShardState& st = *this;
  if (def.size() < 6) return incomplete(name, "short definition");
  // Each field in its range before it is narrowed: a shard index of 2^40 must not become 0.
  constexpr int64_t int32_max = std::numeric_limits<int32_t>::max();
  constexpr int64_t float_bits_end = int64_t{1} << 32;
  if (def[0] < 0 || def[0] > int32_max)
    return incomplete(name, "shard index " + std::to_string(def[0]) + " out of range");
  if (def[2] < 0 || def[2] > int32_max)
    return incomplete(name, "initializer " + std::to_string(def[2]) + " out of range");
  if (def[3] < 0 || def[3] >= float_bits_end || def[5] < 0 || def[5] >= float_bits_end)
    return incomplete(name, "an initializer value or learning rate that is not 32 bits");
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
  if (auto stride = ckpt.ints.find(name + "/row_stride"); stride != ckpt.ints.end()) {
    if (stride->second.size() != 1) return incomplete(name, "a row stride of other than one value");
    d.row_stride = stride->second[0];  // create() bounds it
  }
  auto opt = ckpt.ints.find(name + "/optimizer");
  if (opt == ckpt.ints.end()) return incomplete(name, "no optimizer");
  auto opt_name = core::ints_text(opt->second);
  if (!opt_name) return incomplete(name, "bad optimizer name");
  d.optimizer = std::move(*opt_name);
  auto dynamic = ckpt.ints.find(name + "/dynamic");
  if (dynamic != ckpt.ints.end()) {
    if (dynamic->second.size() != 6) return incomplete(name, "short dynamic-table entry");
    d.dynamic = true;
    d.min_count = static_cast<int32_t>(dynamic->second[0]);
    d.admit_probability = bits_float(dynamic->second[1]);
    d.ttl_steps = dynamic->second[2];
    d.sketch_width = dynamic->second[3];
  }
  // A delta carries every shard the task holds; one created since the full snapshot is
  // made here, one already here must have the same definition (create() checks both).
  if (auto created = st.create(d); !created) return incomplete(name, created.error().message);
  Shard& shard = st.vars_.at(name);
  auto applied = ckpt.ints.find(name + "/applied_tags");
  if (applied == ckpt.ints.end()) return incomplete(name, "no applied closure tags");
  auto tags = AppliedTags::from_ints(applied->second);
  if (!tags) return incomplete(name, tags.error().message);
  shard.applied = std::move(*tags);
  if (shard.table) {
    if (auto st2 =
            restore_rows(ckpt, name, dynamic->second[4], dynamic->second[5], *shard.table, delta);
        !st2)
      return st2.error();
    return {};
  }
  // Everything is checked before anything is taken: a snapshot whose checksums hold can
  // still carry what no training writes (a NaN, a negative count), and a shard half
  // restored from it would serve that.
  auto value = ckpt.tensors.find(name);
  if (value == ckpt.tensors.end() || !(value->second.shape() == shard.value.shape()))
    return incomplete(name, "value missing or of another shape");
  if (auto bad = first_not_finite(value->second); bad >= 0)
    return incomplete(name, "a value that is not finite at element " + std::to_string(bad));
  std::vector<const core::Tensor*> slots;
  for (size_t i = 0; i < shard.slots.slots.size(); ++i) {
    const std::string slot_name = "slot " + std::to_string(i);
    auto slot = ckpt.tensors.find(name + "/slot" + std::to_string(i));
    if (slot == ckpt.tensors.end() || !(slot->second.shape() == shard.slots.slots[i].shape()))
      return incomplete(name, slot_name + " missing or of another shape");
    if (auto bad = first_not_finite(slot->second); bad >= 0)
      return incomplete(
          name, slot_name + " holds a value that is not finite at element " + std::to_string(bad));
    slots.push_back(&slot->second);
  }
  auto it = ckpt.ints.find(name + "/iterations");
  if (it == ckpt.ints.end() || it->second.size() != 1)
    return incomplete(name, "no iteration count");
  if (it->second[0] < 0)
    return incomplete(name, "a negative iteration count (" + std::to_string(it->second[0]) + ")");
  shard.value = value->second;
  for (size_t i = 0; i < slots.size(); ++i)
    shard.slots.slots[i] = *slots[i];
  shard.slots.iterations = it->second[0];
  return {};
}

}  // namespace troupe::actors
