#include "net/wire.hpp"

#include <algorithm>
#include <limits>
#include <numeric>

#include "core/dynamic_table.hpp"
#include "core/partitioner.hpp"

namespace troupe::net {

namespace {

// Every atom of Troupe is declared in wire.hpp, and no two share a value: an actor that
// handles both would take one message for the other.
constexpr caf::atom_value all_atoms[] = {
    create_atom{},    pull_atom{},      pull_rows_atom{}, push_atom{},     push_rows_atom{},
    push_pull_atom{}, batch_atom{},     channel_atom{},   run_atom{},      vars_atom{},
    dataset_atom{},   stats_atom{},     shutdown_atom{},  snapshot_atom{}, snapstep_atom{},
    refused_atom{},   state_atom{},     assign_atom{},    cancel_atom{},   which_atom{},
    restart_atom{},   next_atom{},      ready_atom{},     lost_atom{},     back_atom{},
    done_atom{},      failed_atom{},    ps_down_atom{},   ps_up_atom{},    ps_failed_atom{},
    tick_atom{},      rejoin_atom{},    deadline_atom{},  resume_atom{},   watchdog_atom{},
    task_down_atom{}, rows_page_atom{},
};

constexpr bool all_distinct() {
  const size_t n = sizeof(all_atoms) / sizeof(all_atoms[0]);
  for (size_t i = 0; i < n; ++i)
    for (size_t j = i + 1; j < n; ++j)
      if (all_atoms[i] == all_atoms[j]) return false;
  return true;
}
static_assert(all_distinct(), "two of Troupe's atoms share a value (net/wire.hpp)");

}  // namespace

WireTensor WireTensor::from(core::ConstTensorView v) {
  WireTensor t;
  t.dims = v.shape().to_vector();
  t.data.assign(v.data(), v.data() + v.size());
  return t;
}

core::Expected<WireDtype> parse_wire_dtype(const std::string& text) {
  if (text == "float32" || text == "f32") return WireDtype::float32;
  if (text == "bf16" || text == "bfloat16") return WireDtype::bfloat16;
  return core::make_error(core::Errc::invalid_argument,
                          "unknown wire dtype '" + text.substr(0, 32) + "' (float32 or bf16)");
}

const char* wire_dtype_name(WireDtype t) {
  return t == WireDtype::bfloat16 ? "bf16" : "float32";
}

bool WireTensor::holds(uint64_t n) const {
  if (dims.size() > static_cast<size_t>(core::Shape::max_rank)) return false;
  if (n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
  const auto want = static_cast<int64_t>(n);
  int64_t p = 1;
  for (int64_t d : dims) {
    if (d < 0 || (d > 0 && p > want / d + 1)) return false;
    p *= d;
  }
  return p == want;
}

core::ConstTensorView WireTensor::view() const {
  TROUPE_ASSERT(consistent(), "view() of an inconsistent WireTensor");
  return {data.data(), core::Shape(dims)};
}

namespace {
int64_t rows_of_tensor(const WireTensor& t) {
  return t.dims.empty() ? (t.data.empty() ? 0 : 1) : t.dims[0];
}
}  // namespace

PsLoad load_in(const PsRequest& request) {
  PsLoad load;
  for (const auto& item : request.items) {
    if (item.tensor.data.empty()) continue;
    load.rows_in += rows_of_tensor(item.tensor);
    load.bytes_in += static_cast<int64_t>(item.tensor.data.size()) * 4;
  }
  return load;
}

void add_load_out(const std::vector<PsItem>& reply, PsLoad& load) {
  for (const auto& item : reply) {
    if (item.tensor.data.empty()) continue;
    load.rows_out += rows_of_tensor(item.tensor);
    load.bytes_out += static_cast<int64_t>(item.tensor.data.size()) * 4;
  }
}

core::Expected<core::Tensor> concat_shards(const std::vector<WireTensor>& shards,
                                           int64_t row_stride) {
  if (shards.empty()) return core::make_error(core::Errc::internal, "no shards to concatenate");
  std::vector<core::ConstTensorView> views;
  for (const auto& t : shards) {
    if (!t.consistent())
      return core::make_error(core::Errc::data_loss, "inconsistent tensor from a PS");
    views.push_back(t.view());
  }
  if (row_stride <= 1 || shards.front().dims.empty()) return core::concat_rows(views);
  if (row_stride != static_cast<int64_t>(shards.size()))
    return core::make_error(core::Errc::data_loss, std::to_string(shards.size()) +
                                                       " shards of a variable interleaved over " +
                                                       std::to_string(row_stride));
  return core::interleave_rows(views, "a variable from its PS tasks");
}

core::Tensor part_for_shard(core::ConstTensorView full, const VariableDef& def) {
  return core::shard_rows(full, def.row_offset, std::max<int64_t>(1, def.row_stride),
                          shard_row_count(def));
}

core::Expected<RowRoute> route_rows(const std::string& name, const std::vector<Placement>& shards,
                                    const std::vector<int64_t>& rows) {
  RowRoute r;
  r.local.resize(shards.size());
  r.where.resize(shards.size());
  if (!shards.empty() && shards.front().def.dynamic) {
    // Keys, not rows: every key has a shard, and the shard takes the key itself.
    const auto n = static_cast<int64_t>(shards.size());
    for (size_t k = 0; k < rows.size(); ++k) {
      const auto shard = static_cast<size_t>(core::dynamic_shard_of(rows[k], n));
      r.local[shard].push_back(rows[k]);
      r.where[shard].push_back(static_cast<int64_t>(k));
    }
    return r;
  }
  if (!shards.empty() && shards.front().def.row_stride > 1) {
    // Interleaved: row r on shard r % n, at r / n.
    const auto n = static_cast<int64_t>(shards.size());
    if (shards.front().def.row_stride != n)
      return core::make_error(core::Errc::internal,
                              "'" + name + "' interleaved over " +
                                  std::to_string(shards.front().def.row_stride) +
                                  " shards, placed on " + std::to_string(n));
    for (size_t k = 0; k < rows.size(); ++k) {
      const int64_t row = rows[k];
      const auto shard = static_cast<size_t>(row < 0 ? 0 : row % n);
      if (row < 0 || row / n >= shard_row_count(shards[shard].def))
        return core::make_error(core::Errc::out_of_range,
                                "row " + std::to_string(row) + " of '" + name + "'");
      r.local[shard].push_back(row / n);
      r.where[shard].push_back(static_cast<int64_t>(k));
    }
    return r;
  }
  if (std::is_sorted(rows.begin(), rows.end())) {
    // Ascending (the unique ids a step gathers): one run per shard, found by two searches.
    auto from = rows.begin();
    for (size_t shard = 0; shard < shards.size(); ++shard) {
      const VariableDef& def = shards[shard].def;
      const int64_t first = def.row_offset, count = def.shape.empty() ? 1 : def.shape[0];
      auto begin = std::lower_bound(from, rows.end(), first);
      if (begin != from) break;  // rows below this shard: outside every shard
      auto end = std::lower_bound(begin, rows.end(), first + count);
      auto& local = r.local[shard];
      local.resize(static_cast<size_t>(end - begin));
      std::transform(begin, end, local.begin(), [first](int64_t row) { return row - first; });
      r.where[shard].resize(local.size());
      std::iota(r.where[shard].begin(), r.where[shard].end(), begin - rows.begin());
      from = end;
    }
    if (from != rows.end())
      return core::make_error(core::Errc::out_of_range,
                              "row " + std::to_string(*from) + " of '" + name + "'");
    r.contiguous = true;
    return r;
  }
  for (size_t k = 0; k < rows.size(); ++k) {
    const int64_t row = rows[k];
    auto it = std::upper_bound(shards.begin(), shards.end(), row,
                               [](int64_t x, const Placement& p) { return x < p.def.row_offset; });
    const bool inside = it != shards.begin() && row >= 0 &&
                        row - std::prev(it)->def.row_offset <
                            (std::prev(it)->def.shape.empty() ? 1 : std::prev(it)->def.shape[0]);
    if (!inside)
      return core::make_error(core::Errc::out_of_range,
                              "row " + std::to_string(row) + " of '" + name + "'");
    const auto shard = static_cast<size_t>(std::prev(it) - shards.begin());
    r.local[shard].push_back(row - shards[shard].def.row_offset);
    r.where[shard].push_back(static_cast<int64_t>(k));
  }
  return r;
}

core::Status gather_routed(const std::string& name, const RowRoute& route,
                           const std::vector<const WireTensor*>& parts, core::Tensor& out) {
  const int64_t width = out.shape().row_size();
  for (size_t shard = 0; shard < route.where.size(); ++shard) {
    if (route.where[shard].empty()) continue;
    const WireTensor* part = shard < parts.size() ? parts[shard] : nullptr;
    if (part == nullptr || static_cast<int64_t>(part->data.size()) !=
                               static_cast<int64_t>(route.where[shard].size()) * width)
      return core::make_error(core::Errc::data_loss,
                              "PS answered a rows pull of '" + name + "' with the wrong size");
    if (route.contiguous) {
      std::copy_n(part->data.data(), part->data.size(),
                  out.data() + route.where[shard].front() * width);
      continue;
    }
    for (size_t j = 0; j < route.where[shard].size(); ++j)
      std::copy_n(part->data.data() + static_cast<int64_t>(j) * width, width,
                  out.data() + route.where[shard][j] * width);
  }
  return {};
}

std::vector<float> routed_part(const RowRoute& route, size_t shard, core::ConstTensorView all) {
  const int64_t width = all.shape().row_size();
  const std::vector<int64_t>& where = route.where[shard];
  if (route.contiguous && !where.empty()) {
    const float* from = all.data() + where.front() * width;
    return std::vector<float>(from, from + static_cast<int64_t>(where.size()) * width);
  }
  std::vector<float> part(where.size() * static_cast<size_t>(width));
  for (size_t j = 0; j < where.size(); ++j)
    std::copy_n(all.data() + where[j] * width, width,
                part.data() + static_cast<int64_t>(j) * width);
  return part;
}

caf::error to_caf(const core::Error& e) {
  return caf::error(static_cast<uint8_t>(e.code), error_category, caf::make_message(e.message));
}

core::Error from_caf(const caf::error& e) {
  std::string context;
  if (!e.context().empty() && e.context().match_elements<std::string>())
    context = e.context().get_as<std::string>(0);
  if (e.category() == error_category)
    return core::Error{static_cast<core::Errc>(e.code()), context};
  const std::string what = caf::to_string(e);
  if (e.category() == caf::atom("system")) {
    switch (static_cast<caf::sec>(e.code())) {
      case caf::sec::request_timeout:
      case caf::sec::request_receiver_down:
      case caf::sec::remote_linking_failed:
      case caf::sec::cannot_connect_to_node:
      case caf::sec::no_actor_published_at_port:
        return core::Error{core::Errc::unavailable, what};
      default:
        break;
    }
  }
  return core::Error{core::Errc::internal, what};
}

caf::actor_system_config& add_wire_types(caf::actor_system_config& cfg) {
  return cfg.add_message_types<caf::id_block::troupe>();
}

}  // namespace troupe::net
