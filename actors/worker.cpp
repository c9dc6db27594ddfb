#include "actors/worker.hpp"

#include <algorithm>
#include <exception>

#include <caf/io/all.hpp>

#include "core/partitioner.hpp"
#include "net/connect.hpp"

namespace troupe::actors {

using core::Errc;
using core::make_error;

WorkerRuntime::WorkerRuntime(caf::actor_system& sys, WorkerOptions options)
    : sys_(sys), options_(std::move(options)), self_(sys) {}

core::Status WorkerRuntime::set_placements(const std::vector<net::Placement>& placements) {
  std::map<std::string, Shards> by_name;
  for (const auto& p : placements) {
    if (p.ps_task < 0 || p.ps_task >= options_.cluster.num_tasks("ps"))
      return make_error(Errc::invalid_argument, "placement of '" + p.def.name +
                                                    "' on ps:" + std::to_string(p.ps_task) +
                                                    ", which does not exist");
    by_name[p.def.name].push_back(p);
  }
  for (auto& [name, shards] : by_name)
    std::sort(shards.begin(), shards.end(), [](const net::Placement& a, const net::Placement& b) {
      return a.def.shard < b.def.shard;
    });
  placements_ = std::move(by_name);
  return {};
}

core::Expected<const WorkerRuntime::Shards*> WorkerRuntime::shards_of(
    const std::string& name) const {
  auto it = placements_.find(name);
  if (it == placements_.end()) return make_error(Errc::not_found, "no variable '" + name + "'");
  return &it->second;
}

core::Expected<caf::actor> WorkerRuntime::ps(int task) {
  if (auto it = ps_.find(task); it != ps_.end()) return it->second;
  const net::TaskId id{"ps", task};
  auto a = net::connect_with_retry(sys_, options_.cluster.address(id), id.to_string(),
                                   options_.connect_timeout);
  if (!a) return a.error();
  ps_[task] = *a;
  return *a;
}

template <class T, class... Ts>
core::Expected<T> WorkerRuntime::ask(const caf::actor& dst, Ts&&... xs) {
  core::Expected<T> out = make_error(Errc::internal, "no reply");
  self_->request(dst, options_.request_timeout, std::forward<Ts>(xs)...)
      .receive([&](T& v) { out = std::move(v); }, [&](caf::error& e) { out = net::from_caf(e); });
  return out;
}

template <class Reply, class MakeRequest>
core::Expected<std::vector<std::vector<Reply>>> WorkerRuntime::fan_out(
    const std::vector<std::string>& names, MakeRequest make_request) {
  // Send every shard's request first, then collect: the shards work in parallel.
  using Handle = typename decltype(make_request(std::declval<const caf::actor&>(), size_t{0},
                                                std::declval<const net::Placement&>()))::value_type;
  struct Pending {
    size_t name;
    int task;
    Handle handle;
  };
  std::vector<Pending> pending;
  for (size_t i = 0; i < names.size(); ++i) {
    auto shards = shards_of(names[i]);
    if (!shards) return shards.error();
    for (const auto& p : **shards) {
      auto dst = ps(p.ps_task);
      if (!dst) return dst.error();
      auto handle = make_request(*dst, i, p);
      if (!handle) return handle.error();
      pending.push_back({i, p.ps_task, std::move(*handle)});
    }
  }
  std::vector<std::vector<Reply>> replies(names.size());
  core::Status failed;
  for (auto& p : pending)
    p.handle.receive([&](Reply& r) { replies[p.name].push_back(std::move(r)); },
                     [&](caf::error& e) {
                       const core::Error err = net::from_caf(e);
                       // Forget a shard we cannot reach: the next closure reconnects, which
                       // finds a restarted PS.
                       if (err.code == Errc::unavailable) ps_.erase(p.task);
                       if (failed.ok()) failed = err;
                     });
  if (!failed.ok()) return failed.error();
  return replies;
}

namespace {

core::Expected<std::vector<core::Tensor>> concat_all(
    const std::vector<std::vector<net::WireTensor>>& parts) {
  std::vector<core::Tensor> out;
  for (const auto& shard_parts : parts) {
    auto whole = net::concat_shards(shard_parts);
    if (!whole) return whole.error();
    out.push_back(std::move(*whole));
  }
  return out;
}

// The rows of `grad` that `p` holds, as a tensor for the wire.
core::Expected<net::WireTensor> shard_part(const std::string& name, core::ConstTensorView grad,
                                           const net::Placement& p) {
  if (grad.shape().rank() == 0) return net::WireTensor::from(grad);
  const int64_t end = p.def.row_offset + (p.def.shape.empty() ? 1 : p.def.shape[0]);
  if (end > grad.shape()[0])
    return make_error(Errc::invalid_argument, "gradient of '" + name + "' has too few rows");
  return net::WireTensor::from(grad.rows(p.def.row_offset, end));
}

std::vector<std::string> names_of(
    const std::vector<std::pair<std::string, core::ConstTensorView>>& grads) {
  std::vector<std::string> names;
  for (const auto& g : grads)
    names.push_back(g.first);
  return names;
}

}  // namespace

core::Expected<std::vector<core::Tensor>> WorkerRuntime::pull(
    const std::vector<std::string>& names) {
  auto parts =
      fan_out<net::WireTensor>(names, [&](const caf::actor& dst, size_t i, const net::Placement&) {
        return core::Expected<decltype(self_->request(dst, options_.request_timeout,
                                                      net::pull_atom::value, names[i]))>(
            self_->request(dst, options_.request_timeout, net::pull_atom::value, names[i]));
      });
  if (!parts) return parts.error();
  return concat_all(*parts);
}

template <class Reply, class Atom>
core::Expected<std::vector<std::vector<Reply>>> WorkerRuntime::send_gradients(
    Atom atom, const std::vector<std::pair<std::string, core::ConstTensorView>>& grads) {
  return fan_out<Reply>(
      names_of(grads), [&](const caf::actor& dst, size_t i, const net::Placement& p) {
        using Handle = decltype(self_->request(dst, options_.request_timeout, atom, closure_id_,
                                               grads[i].first, net::WireTensor()));
        auto part = shard_part(grads[i].first, grads[i].second, p);
        if (!part) return core::Expected<Handle>(part.error());
        return core::Expected<Handle>(self_->request(
            dst, options_.request_timeout, atom, closure_id_, grads[i].first, std::move(*part)));
      });
}

core::Status WorkerRuntime::push(
    const std::vector<std::pair<std::string, core::ConstTensorView>>& grads) {
  auto acks = send_gradients<bool>(net::push_atom::value, grads);
  if (!acks) return acks.error();
  return {};
}

core::Expected<std::vector<core::Tensor>> WorkerRuntime::push_pull(
    const std::vector<std::pair<std::string, core::ConstTensorView>>& grads) {
  auto parts = send_gradients<net::WireTensor>(net::push_pull_atom::value, grads);
  if (!parts) return parts.error();
  return concat_all(*parts);
}

core::Expected<size_t> WorkerRuntime::shard_of_row(const std::string& name, const Shards& shards,
                                                   int64_t row) {
  auto it =
      std::upper_bound(shards.begin(), shards.end(), row,
                       [](int64_t r, const net::Placement& p) { return r < p.def.row_offset; });
  if (it == shards.begin() || row < 0)
    return make_error(Errc::out_of_range, "row " + std::to_string(row) + " of '" + name + "'");
  return static_cast<size_t>(std::prev(it) - shards.begin());
}

core::Expected<core::Tensor> WorkerRuntime::pull_rows(const std::string& name,
                                                      const std::vector<int64_t>& rows) {
  auto shards = shards_of(name);
  if (!shards) return shards.error();
  const Shards& s = **shards;
  // Group rows by shard, remembering where each goes in the result.
  std::vector<std::vector<int64_t>> local(s.size()), where(s.size());
  for (size_t k = 0; k < rows.size(); ++k) {
    auto found = shard_of_row(name, s, rows[k]);
    if (!found) return found.error();
    const size_t shard = *found;
    local[shard].push_back(rows[k] - s[shard].def.row_offset);
    where[shard].push_back(static_cast<int64_t>(k));
  }
  const int64_t width =
      s.front().def.shape.size() > 1 ? core::Shape(s.front().def.shape).row_size() : 1;
  std::vector<int64_t> dims = s.front().def.shape;
  dims[0] = static_cast<int64_t>(rows.size());
  core::Tensor out{core::Shape(dims)};
  for (size_t shard = 0; shard < s.size(); ++shard) {
    if (local[shard].empty()) continue;
    auto dst = ps(s[shard].ps_task);
    if (!dst) return dst.error();
    auto part = ask<net::WireTensor>(*dst, net::pull_rows_atom::value, name, local[shard]);
    if (!part) return part.error();
    if (static_cast<int64_t>(part->data.size()) !=
        static_cast<int64_t>(local[shard].size()) * width)
      return make_error(Errc::data_loss,
                        "PS answered a rows pull of '" + name + "' with the wrong size");
    for (size_t j = 0; j < where[shard].size(); ++j)
      std::copy_n(part->data.data() + static_cast<int64_t>(j) * width, width,
                  out.data() + where[shard][j] * width);
  }
  return out;
}

core::Status WorkerRuntime::push_rows(const std::string& name, const std::vector<int64_t>& rows,
                                      core::ConstTensorView grads) {
  auto shards = shards_of(name);
  if (!shards) return shards.error();
  const Shards& s = **shards;
  const int64_t width = grads.shape().row_size();
  if (grads.shape().rank() < 1 || grads.shape()[0] != static_cast<int64_t>(rows.size()))
    return make_error(Errc::invalid_argument,
                      "row gradient of '" + name + "' does not match its rows");
  std::vector<net::RowsUpdate> updates(s.size());
  for (size_t k = 0; k < rows.size(); ++k) {
    auto found = shard_of_row(name, s, rows[k]);
    if (!found) return found.error();
    const size_t shard = *found;
    updates[shard].rows.push_back(rows[k] - s[shard].def.row_offset);
    updates[shard].grads.data.insert(updates[shard].grads.data.end(),
                                     grads.data() + static_cast<int64_t>(k) * width,
                                     grads.data() + static_cast<int64_t>(k + 1) * width);
  }
  for (size_t shard = 0; shard < s.size(); ++shard) {
    if (updates[shard].rows.empty()) continue;
    updates[shard].grads.dims = {static_cast<int64_t>(updates[shard].rows.size()), width};
    auto dst = ps(s[shard].ps_task);
    if (!dst) return dst.error();
    auto r = ask<bool>(*dst, net::push_rows_atom::value, closure_id_, name, updates[shard]);
    if (!r) return r.error();
  }
  return {};
}

core::Status WorkerRuntime::build_dataset(const std::string& name) {
  const auto* fn = options_.registry->dataset(name);
  if (fn == nullptr)
    return make_error(Errc::not_found, "no dataset function '" + name + "' registered");
  core::InputContext ctx;
  ctx.num_input_pipelines = std::max(1, options_.cluster.num_tasks("worker"));
  ctx.input_pipeline_id = options_.index;
  ctx.num_replicas_in_sync = 1;
  iterators_[name] = (*fn)(ctx).make_iterator();
  return {};
}

core::Expected<std::optional<core::Batch>> WorkerRuntime::next_batch(const PerWorkerDataset& ds) {
  auto it = iterators_.find(ds.name);
  if (it == iterators_.end()) {
    if (auto st = build_dataset(ds.name); !st) return st.error();
    it = iterators_.find(ds.name);
  }
  return it->second->next();
}

core::Expected<std::vector<char>> WorkerRuntime::run(const net::ClosureMsg& closure) {
  const auto* step = options_.registry->step(closure.step);
  if (step == nullptr)
    return make_error(Errc::not_found, "no step '" + closure.step + "' registered on this worker");
  if (closure.repeat < 1 || closure.repeat > 0xffff || closure.id >= (uint64_t{1} << 47))
    return make_error(Errc::invalid_argument,
                      "closure " + std::to_string(closure.id) + ": bad id or repeat count");
  ++closures_run_;
  try {
    // Each repetition tags its pushes with its own id, so that a shard applies every
    // repetition once and a retried closure's repetitions are recognised.
    core::Expected<std::vector<char>> result = make_error(Errc::internal, "no step ran");
    for (uint32_t k = 0; k < closure.repeat; ++k) {
      closure_id_ = (closure.id << 16) | k;
      result = (*step)(*this, closure.args);
      if (!result) break;
    }
    return result;
  } catch (const std::exception& e) {
    return make_error(Errc::internal, "step '" + closure.step + "' threw: " + e.what());
  } catch (...) {
    return make_error(Errc::internal, "step '" + closure.step + "' threw a non-exception");
  }
}

void worker(caf::blocking_actor* self, WorkerOptions options) {
  WorkerRuntime rt(self->system(), std::move(options));
  bool running = true;
  self->receive_while(running)(
      [&](net::vars_atom, const std::vector<net::Placement>& p) -> caf::result<caf::ok_atom> {
        if (auto st = rt.set_placements(p); !st) return net::to_caf(st.error());
        return caf::ok_atom::value;
      },
      [&](net::dataset_atom, const std::string& name) -> caf::result<caf::ok_atom> {
        if (auto st = rt.build_dataset(name); !st) return net::to_caf(st.error());
        return caf::ok_atom::value;
      },
      [&](net::run_atom, const net::ClosureMsg& c) -> caf::result<std::vector<char>> {
        auto r = rt.run(c);
        if (!r) return net::to_caf(r.error());
        return std::move(*r);
      },
      [&](net::stats_atom) { return std::vector<int64_t>{rt.closures_run()}; },
      [&](net::shutdown_atom) { running = false; });
}

}  // namespace troupe::actors
