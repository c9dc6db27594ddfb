#include <algorithm>
#include <map>
#include <thread>
#include <unordered_map>

#include "actors/serve.hpp"
#include "api/impl.hpp"
#include "core/optimizer.hpp"
#include "core/optimizer_config.hpp"
#include "troupe/troupe.hpp"

namespace troupe {

using core::Errc;
using core::make_error;

core::Status serve(const net::ClusterResolver& resolver, const Registry& registry,
                   const net::NodeOptions& options, const std::function<bool()>& stop) {
  return actors::serve(resolver, registry, options, {}, stop);
}

ParameterServerStrategy::ParameterServerStrategy(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}
ParameterServerStrategy::~ParameterServerStrategy() {
  // A model may outlive its strategy: it drops its coordinator (whose actor lives in this
  // system) now, or the system would wait for that actor forever.
  if (impl_)
    for (auto& [key, release] : std::map(impl_->before_destroy))
      release();
}

core::Expected<std::unique_ptr<ParameterServerStrategy>> ParameterServerStrategy::make(
    const net::ClusterResolver& resolver, std::shared_ptr<const core::Partitioner> partitioner,
    Options options) {
  auto impl = std::make_unique<Impl>();
  impl->spec = resolver.cluster_spec();
  impl->partitioner = std::move(partitioner);
  impl->options = options;
  impl->options.stop = nullptr;  // for start-up only: it may point into the caller's frame
  if (impl->spec.num_tasks("ps") == 0)
    return make_error(Errc::invalid_argument, "the cluster has no ps tasks");
  if (impl->spec.num_tasks("worker") == 0)
    return make_error(Errc::invalid_argument, "the cluster has no worker tasks");
  if (options.ps_replicas < 1 || options.ps_replicas > impl->spec.num_tasks("ps"))
    return make_error(Errc::invalid_argument,
                      "ps_replicas " + std::to_string(options.ps_replicas) +
                          ": each copy of a shard needs a PS task of its own (the cluster has " +
                          std::to_string(impl->spec.num_tasks("ps")) + ")");
  impl->cfg = std::make_unique<caf::actor_system_config>();
  {
    // The chief's heartbeats are spaced as its tasks' are, and its links tolerate silence
    // as long as theirs do on a crowded host.
    std::string host;
    const auto tasks = impl->spec.tasks();
    if (std::find(tasks.begin(), tasks.end(), resolver.task()) != tasks.end())
      if (auto hp = net::parse_host_port(impl->spec.address(resolver.task()))) host = hp->host;
    net::configure(*impl->cfg,
                   net::for_job({}, impl->spec, host, std::thread::hardware_concurrency()));
  }
  impl->sys = std::make_unique<caf::actor_system>(*impl->cfg);
  impl->self.emplace(*impl->sys);
  for (int i = 0; i < impl->spec.num_tasks("ps"); ++i) {
    const net::TaskId task{"ps", i};
    auto a = net::connect_with_retry(*impl->sys, impl->spec.address(task), task.to_string(),
                                     options.connect_timeout, options.stop);
    if (!a && options.stop && options.stop())
      return make_error(Errc::cancelled,
                        "ParameterServerStrategy: stopped while reaching " + task.to_string());
    if (!a) return a.error();
    impl->ps.push_back(*a);
  }
  return std::unique_ptr<ParameterServerStrategy>(new ParameterServerStrategy(std::move(impl)));
}

namespace {

// The backups of a shard whose primary is `primary`: the next tasks round the ring, those
// on hosts that hold no copy yet first (a host's loss then takes one copy at most).
std::vector<int32_t> backups_of(const ParameterServerStrategy::Impl& m, int32_t primary) {
  const int num_ps = static_cast<int>(m.ps.size());
  auto host = [&](int32_t t) {
    auto hp = net::parse_host_port(m.spec.address({"ps", t}));
    return hp ? hp->host : std::to_string(t);
  };
  std::vector<std::string> hosts{host(primary)};
  std::vector<int32_t> out, later;
  for (int k = 1; k < num_ps; ++k) {
    const int32_t t = (primary + k) % num_ps;
    const std::string h = host(t);
    if (std::find(hosts.begin(), hosts.end(), h) == hosts.end()) {
      hosts.push_back(h);
      out.push_back(t);
    } else {
      later.push_back(t);
    }
  }
  out.insert(out.end(), later.begin(), later.end());
  out.resize(static_cast<size_t>(m.options.ps_replicas - 1));
  return out;
}

// Creates each shard of a variable on its PS task and its backups, and records where they
// went.
core::Status place_shards(ParameterServerStrategy::Impl& m, std::vector<net::Placement> shards) {
  const int num_ps = static_cast<int>(m.ps.size());
  for (auto& p : shards) {
    p.ps_task = (m.next_ps + p.def.shard) % num_ps;
    p.backups = backups_of(m, p.ps_task);
    for (size_t r = 0; r <= p.backups.size(); ++r) {
      const int32_t task = r == 0 ? p.ps_task : p.backups[r - 1];
      core::Status st;
      (*m.self)
          ->request(m.ps[static_cast<size_t>(task)], m.options.request_timeout,
                    net::create_atom::value, p.def)
          .receive([](caf::ok_atom) {}, [&](caf::error& e) { st = net::from_caf(e); });
      if (!st)
        return make_error(st.error().code,
                          "creating '" + p.def.name + "' shard " + std::to_string(p.def.shard) +
                              " on ps:" + std::to_string(task) + ": " + st.error().message);
    }
  }
  m.next_ps = (m.next_ps + static_cast<int>(shards.size())) % num_ps;
  m.placements.insert(m.placements.end(), shards.begin(), shards.end());
  return {};
}

core::Status check_new_name(const ParameterServerStrategy::Impl& m, const std::string& name) {
  for (const auto& p : m.placements)
    if (p.def.name == name)
      return make_error(Errc::invalid_argument, "variable '" + name + "' exists already");
  return {};
}

net::VariableDef definition(const std::string& name, core::Initializer init,
                            const std::string& optimizer, float learning_rate) {
  net::VariableDef d;
  d.name = name;
  d.init_kind = static_cast<int32_t>(init.kind);
  d.init_value = init.value;
  d.seed = init.seed;
  d.optimizer = optimizer;
  d.learning_rate = learning_rate;
  return d;
}

}  // namespace

core::Expected<Variable> ParameterServerStrategy::create_variable(const std::string& name,
                                                                  core::Shape shape,
                                                                  core::Initializer init,
                                                                  const std::string& optimizer,
                                                                  float learning_rate) {
  Impl& m = *impl_;
  if (auto st = check_new_name(m, name); !st) return st.error();
  int shards = 1;
  if (m.partitioner && shape.rank() >= 1) shards = m.partitioner->num_shards(shape);
  core::ShardedVariableSpec sharded(core::VariableSpec{name, shape, init}, shards,
                                    m.options.row_layout);
  std::vector<net::Placement> placed;
  for (const auto& s : sharded.shards()) {
    net::Placement p;
    p.def = definition(name, init, optimizer, learning_rate);
    p.def.shard = s.index;
    p.def.row_offset = s.row_offset;
    p.def.row_stride = s.shape.rank() == 0 || shards == 1 ? 1 : s.row_stride;
    p.def.shape = s.shape.to_vector();
    placed.push_back(p);
  }
  if (auto st = place_shards(m, std::move(placed)); !st) return st.error();
  return Variable{name, shape, sharded.num_shards()};
}

core::Expected<Variable> ParameterServerStrategy::create_dynamic_table(const std::string& name,
                                                                       const DynamicTableSpec& spec,
                                                                       core::Initializer init,
                                                                       const std::string& optimizer,
                                                                       float learning_rate) {
  Impl& m = *impl_;
  if (auto st = check_new_name(m, name); !st) return st.error();
  const int shards = spec.shards > 0 ? spec.shards : static_cast<int>(m.ps.size());
  if (shards < 1 || shards > 4096)
    return make_error(Errc::invalid_argument, "dynamic table '" + name + "': shards in [1, 4096]");
  if (spec.max_rows < 0 || (spec.max_rows > 0 && spec.max_rows < shards))
    return make_error(Errc::invalid_argument, "dynamic table '" + name + "': max_rows " +
                                                  std::to_string(spec.max_rows) +
                                                  " must be 0 (no cap) or at least its " +
                                                  std::to_string(shards) + " shards");
  std::vector<net::Placement> placed;
  for (int i = 0; i < shards; ++i) {
    net::Placement p;
    p.def = definition(name, init, optimizer, learning_rate);
    p.def.shard = i;
    p.def.row_offset = i;
    // The cap split exactly: the shards' caps add up to max_rows.
    const int64_t cap = spec.max_rows / shards + (i < spec.max_rows % shards ? 1 : 0);
    p.def.shape = {cap, spec.width};
    p.def.dynamic = true;
    p.def.min_count = spec.min_count;
    p.def.admit_probability = spec.admit_probability;
    p.def.ttl_steps = spec.ttl_steps;
    p.def.sketch_width = spec.sketch_width;
    placed.push_back(p);
  }
  if (auto st = place_shards(m, std::move(placed)); !st) return st.error();
  return Variable{name, core::Shape{spec.max_rows, spec.width}, shards};
}

core::Expected<Variable> ParameterServerStrategy::create_variable(
    const std::string& name, core::Shape shape, core::Initializer init,
    const core::OptimizerConfig& optimizer) {
  return create_variable(name, shape, init, core::optimizer_text(optimizer),
                         optimizer.learning_rate);
}

core::Expected<Variable> ParameterServerStrategy::create_dynamic_table(
    const std::string& name, const DynamicTableSpec& spec, core::Initializer init,
    const core::OptimizerConfig& optimizer) {
  return create_dynamic_table(name, spec, init, core::optimizer_text(optimizer),
                              optimizer.learning_rate);
}

core::Status ParameterServerStrategy::assign(const Variable& v, core::ConstTensorView value) {
  Impl& m = *impl_;
  if (value.shape() != v.shape)
    return make_error(Errc::invalid_argument, "assigning " + value.shape().to_string() +
                                                  " to variable '" + v.name + "' of shape " +
                                                  v.shape.to_string());
  bool found = false;
  for (const auto& p : m.placements) {
    if (p.def.name != v.name) continue;
    if (p.def.dynamic)
      return make_error(Errc::invalid_argument,
                        "variable '" + v.name + "' is a dynamic table: its rows come by key");
    found = true;
    const core::Shape shard_shape(p.def.shape);
    const core::Tensor part = net::part_for_shard(value, p.def);
    auto opt = core::make_optimizer_from(p.def.optimizer, p.def.learning_rate);
    if (!opt) return opt.error();
    net::ShardState state;
    state.value = net::WireTensor::from(part);
    for (const auto& slot : (*opt)->make_slots(shard_shape).slots)
      state.slots.push_back(net::WireTensor::from(slot));
    for (int32_t task : m.routing->live(p)) {
      auto ok = m.ask_ps<caf::ok_atom>(task, net::assign_atom::value, net::shard_key(p.def), state);
      if (!ok)
        return make_error(ok.error().code, "setting " + net::shard_key(p.def) + " on ps:" +
                                               std::to_string(task) + ": " + ok.error().message);
    }
  }
  if (!found) return make_error(Errc::not_found, "no variable '" + v.name + "'");
  return {};
}

core::Expected<core::Tensor> ParameterServerStrategy::read(const Variable& v) {
  Impl& m = *impl_;
  std::vector<net::Placement> shards;
  for (const auto& p : m.placements)
    if (p.def.name == v.name) shards.push_back(p);
  if (shards.empty()) return make_error(Errc::not_found, "no variable '" + v.name + "'");
  std::sort(shards.begin(), shards.end(),
            [](auto& a, auto& b) { return a.def.shard < b.def.shard; });
  std::vector<net::WireTensor> parts;
  for (const auto& p : shards) {
    auto part =
        m.ask_ps<net::WireTensor>(m.serving(p), net::pull_atom::value, net::shard_key(p.def));
    if (!part) return part.error();
    parts.push_back(std::move(*part));
  }
  return net::concat_shards(parts, shards.front().def.row_stride);
}

core::Expected<core::Tensor> ParameterServerStrategy::read_rows(const Variable& v,
                                                                const std::vector<int64_t>& rows) {
  Impl& m = *impl_;
  std::vector<net::Placement> shards;
  for (const auto& p : m.placements)
    if (p.def.name == v.name) shards.push_back(p);
  if (shards.empty()) return make_error(Errc::not_found, "no variable '" + v.name + "'");
  if (v.shape.rank() < 1)
    return make_error(Errc::invalid_argument, "'" + v.name + "' is a scalar: it has no rows");
  std::sort(shards.begin(), shards.end(),
            [](auto& a, auto& b) { return a.def.shard < b.def.shard; });
  auto route = net::route_rows(v.name, shards, rows);
  if (!route) return route.error();
  std::vector<net::WireTensor> parts(shards.size());
  std::vector<const net::WireTensor*> answered(shards.size(), nullptr);
  for (size_t k = 0; k < shards.size(); ++k) {
    if (route->local[k].empty()) continue;
    auto part = m.ask_ps<net::WireTensor>(m.serving(shards[k]), net::pull_rows_atom::value,
                                          net::shard_key(shards[k].def), route->local[k]);
    if (!part) return part.error();
    parts[k] = std::move(*part);
    answered[k] = &parts[k];
  }
  std::vector<int64_t> dims = v.shape.to_vector();
  dims[0] = static_cast<int64_t>(rows.size());
  core::Tensor out{core::Shape(dims)};
  if (auto st = net::gather_routed(v.name, *route, answered, out); !st) return st.error();
  return out;
}

core::Expected<TableRows> ParameterServerStrategy::read_table(const Variable& v, int32_t min_count,
                                                              int64_t page_rows) {
  Impl& m = *impl_;
  std::vector<const net::Placement*> shards;
  for (const auto& p : m.placements)
    if (p.def.name == v.name) shards.push_back(&p);
  if (shards.empty()) return make_error(Errc::not_found, "no variable '" + v.name + "'");
  if (!shards.front()->def.dynamic)
    return make_error(Errc::invalid_argument, "'" + v.name + "' is not a dynamic table: read it");
  const int64_t width = v.shape.rank() == 2 ? v.shape[1] : 0;
  TableRows out;
  std::vector<float> values;
  std::unordered_map<int64_t, size_t>
      at;  // key -> its row in out: a key read twice keeps the later
  for (const net::Placement* p : shards) {
    for (int64_t from = 0; from >= 0;) {
      auto page = m.ask_ps<net::RowsPage>(m.serving(*p), net::rows_page_atom::value,
                                          net::shard_key(p->def), from, page_rows, min_count);
      if (!page) return page.error();
      const size_t n = page->keys.size();
      if (page->values.data.size() != n * static_cast<size_t>(width) ||
          (page->next >= 0 && page->next <= from))
        return make_error(Errc::data_loss, "'" + net::shard_key(p->def) + "': a malformed page");
      for (size_t i = 0; i < n; ++i) {
        const float* row = page->values.data.data() + i * static_cast<size_t>(width);
        auto [it, fresh] = at.emplace(page->keys[i], out.keys.size());
        if (fresh) {
          out.keys.push_back(page->keys[i]);
          values.insert(values.end(), row, row + width);
        } else {
          std::copy_n(row, width, values.data() + it->second * static_cast<size_t>(width));
        }
      }
      from = page->next;
    }
  }
  out.values = core::Tensor(core::Shape{static_cast<int64_t>(out.keys.size()), width});
  std::copy(values.begin(), values.end(), out.values.data());
  return out;
}

core::Expected<std::vector<Variable>> ParameterServerStrategy::find_variables() {
  Impl& m = *impl_;
  std::map<std::string, std::vector<net::Placement>> found;  // by name, not created here
  for (int task = 0; task < static_cast<int>(m.ps.size()); ++task) {
    auto defs = m.ask_ps<std::vector<net::VariableDef>>(task, net::defs_atom::value);
    if (!defs) return defs.error();
    for (auto& d : *defs)
      if (check_new_name(m, d.name).ok()) found[d.name].push_back({std::move(d), task, {}});
  }
  std::vector<Variable> out;
  for (auto& [name, held] : found) {
    std::stable_sort(held.begin(), held.end(),
                     [](auto& a, auto& b) { return a.def.shard < b.def.shard; });
    // A shard on several tasks is replicated: the first holds it, the others back it up.
    std::vector<net::Placement> shards;
    for (auto& p : held) {
      if (!shards.empty() && shards.back().def.shard == p.def.shard)
        shards.back().backups.push_back(p.ps_task);
      else
        shards.push_back(std::move(p));
    }
    const auto shard_text = [&, n = name](int32_t k) {
      return "variable '" + n + "' shard " + std::to_string(k);
    };
    for (size_t k = 0; k < shards.size(); ++k)
      if (shards[k].def.shard != static_cast<int32_t>(k))
        return make_error(Errc::unavailable,
                          shard_text(static_cast<int32_t>(k)) +
                              (shards[k].def.shard < static_cast<int32_t>(k)
                                   ? " is held twice (ps:" + std::to_string(shards[k].ps_task) + ")"
                                   : " is on no PS task"));
    const auto& first = shards.front().def;
    std::vector<int64_t> dims = first.shape;
    if (first.dynamic) {
      dims[0] = 0;  // the table's cap: its shards' caps added up
      for (const auto& p : shards)
        dims[0] += p.def.shape.empty() ? 0 : p.def.shape[0];
    } else if (!dims.empty()) {
      dims[0] = 0;
      const auto n = static_cast<int64_t>(shards.size());
      for (const auto& p : shards) {
        // A run after the shard before it, or interleaved: shard k's rows from row k.
        const bool follows = first.row_stride > 1
                                 ? p.def.row_stride == n && p.def.row_offset == p.def.shard
                                 : p.def.row_stride == 1 && p.def.row_offset == dims[0];
        if (!follows || p.def.shape.size() != first.shape.size())
          return make_error(Errc::unavailable,
                            shard_text(p.def.shard) + " does not follow the shard before it");
        dims[0] += p.def.shape[0];
      }
    }
    out.push_back(Variable{name, core::Shape(dims), static_cast<int>(shards.size())});
    m.placements.insert(m.placements.end(), shards.begin(), shards.end());
  }
  return out;
}

core::Expected<std::vector<PsTaskStats>> ParameterServerStrategy::ps_stats() {
  Impl& m = *impl_;
  std::vector<PsTaskStats> out;
  for (int task = 0; task < static_cast<int>(m.ps.size()); ++task) {
    if (m.routing->is_lost(task)) {
      PsTaskStats lost;
      lost.snapshot_updates = 0;
      lost.lost = true;
      out.push_back(lost);
      continue;
    }
    auto v = m.ask_ps<std::vector<int64_t>>(task, net::stats_atom::value);
    if (!v) return v.error();
    const auto s = net::PsStats::from(*v);
    out.push_back(PsTaskStats{s.variables,
                              s.pulls,
                              s.updates_applied,
                              s.snapshots,
                              s.rss_bytes,
                              s.snapshot_copy_us,
                              s.snapshot_write_ms,
                              s.bf16_requests,
                              s.table_rows,
                              s.rows_admitted,
                              s.rows_evicted,
                              s.grads_dropped_unadmitted,
                              s.table_bytes,
                              s.snapshot_full_bytes,
                              s.snapshot_delta_bytes,
                              s.snapshot_updates,
                              s.rows_pulled,
                              s.rows_pushed,
                              s.bytes_pulled,
                              s.bytes_pushed});
  }
  return out;
}

const net::ClusterSpec& ParameterServerStrategy::cluster_spec() const {
  return impl_->spec;
}
int ParameterServerStrategy::num_workers() const {
  return impl_->spec.num_tasks("worker");
}

}  // namespace troupe
