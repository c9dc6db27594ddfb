// A worker's PS client: the variable placement, connections to each PS task (the tensor
// channel, or CAF messages), and pulls and pushes batched into one PsRequest per PS task.
// The worker actor and the rest of WorkerRuntime are in worker.cpp.
#include "actors/worker.hpp"

#include "net/auth.hpp"

#include <algorithm>
#include <exception>

#include <caf/io/all.hpp>

#include "core/partitioner.hpp"
#include "net/ask.hpp"
#include "net/connect.hpp"

namespace troupe::actors {

using core::Errc;
using core::make_error;

core::Status WorkerRuntime::set_placements(const std::vector<net::Placement>& placements) {
  std::map<std::string, Shards> by_name;
  for (const auto& p : placements) {
    for (size_t r = 0; r <= p.backups.size(); ++r) {
      const int32_t task = r == 0 ? p.ps_task : p.backups[r - 1];
      if (task < 0 || task >= options_.cluster.num_tasks("ps"))
        return make_error(Errc::invalid_argument, "placement of '" + p.def.name +
                                                      "' on ps:" + std::to_string(task) +
                                                      ", which does not exist");
    }
    by_name[p.def.name].push_back(p);
  }
  for (auto& [name, shards] : by_name)
    std::sort(shards.begin(), shards.end(), [](const net::Placement& a, const net::Placement& b) {
      return a.def.shard < b.def.shard;
    });
  placements_ = std::move(by_name);
  replicated_ = std::any_of(placements.begin(), placements.end(),
                            [](const net::Placement& p) { return !p.backups.empty(); });
  return {};
}

// With replicated shards, a PS task that dies under a step is failed over by the chief in
// moments (the task's links close). Failing the closure would have the coordinator send it
// again, and with it every closure queued behind it on this worker, each failing against
// the same task until the new epoch arrives: at 256 workers a quarter of a job's closures
// ran twice. Instead the request is made again, routed anew, once this worker's routing
// has moved past the epoch it was made in, within connect_timeout and while the closure
// is not cancelled; past that the error stands. A push made again carries the same tag,
// so a replica that applied it the first time ignores it.
template <class Attempt>
auto WorkerRuntime::across_failover(Attempt&& attempt) -> decltype(attempt()) {
  using namespace std::chrono;
  const auto deadline = steady_clock::now() + options_.connect_timeout;
  for (;;) {
    const uint64_t epoch = routing_->epoch();
    auto result = attempt();
    if (result || !replicated_ || result.error().code != Errc::unavailable) return result;
    while (!routing_->wait_past(epoch, milliseconds(20))) {
      if (steady_clock::now() >= deadline || cancelled()) return result;
    }
    ++rerouted_;
  }
}

core::Expected<const WorkerRuntime::Shards*> WorkerRuntime::shards_of(
    const std::string& name) const {
  auto it = placements_.find(name);
  if (it == placements_.end()) return make_error(Errc::not_found, "no variable '" + name + "'");
  return &it->second;
}

core::Expected<caf::actor> WorkerRuntime::ps(int task) {
  if (auto it = ps_.find(task); it != ps_.end()) {
    if (!net::is_terminated(it->second)) return it->second;
    forget(task);  // that PS process is gone; a restarted one may answer on its address
  }
  const net::TaskId id{"ps", task};
  const auto now = std::chrono::steady_clock::now();
  if (auto it = unreachable_until_.find(task); it != unreachable_until_.end() &&
                                               now < it->second.until &&
                                               it->second.epoch == routing_->epoch())
    return make_error(Errc::unavailable, id.to_string() + " was unreachable moments ago");
  auto unreachable = [&](core::Error e) {
    // Closures queued behind this one fail at once for a moment instead of each spending
    // the connect timeout on a PS that is down.
    unreachable_until_[task] = {std::chrono::steady_clock::now() + unreachable_backoff,
                                routing_->epoch()};
    return e;
  };
  // A replica the chief failed over meanwhile is given up at once: the closure fails
  // `unavailable` and runs again, routed to the promoted copies.
  // The first reach is made while the whole job starts: on a crowded host a live PS can
  // take longer than any fixed bound to answer 100 handshakes. There the bound counts from
  // the last sign of life (a link made, or the PS proving the secret to a tunnel or
  // closing a handshake itself: net::Patience), within first_reach_bound():
  // only a PS that shows none for request_timeout fails the closure.
  const bool first = reached_.count(task) == 0;
  const auto timeout = first ? options_.request_timeout : options_.connect_timeout;
  const auto start = std::chrono::steady_clock::now();
  const auto cap = start + (first ? first_reach_bound() : timeout);
  auto deadline = start + timeout;
  const auto left = [&] {
    return std::max(std::chrono::milliseconds(1),
                    std::chrono::duration_cast<std::chrono::milliseconds>(
                        deadline - std::chrono::steady_clock::now()));
  };
  const auto give_up = [&] { return routing_->is_lost(task) || cancelled(); };
  // The first request doubles as a check that this is a live process: right after a PS
  // died, the address may still yield its old connection, and requests to that vanish.
  // Within `timeout`, a link that dropped meanwhile (its proxy terminated: a loaded
  // machine's start-up drops some) is made again, and a silent one asked again every
  // connect_timeout; a PS the chief declared lost, or a cancelled closure, ends it.
  // On the first reach a link that stays up is a sign of life too (its heartbeats keep it
  // up: net::for_job's connection timeout): an ask it leaves unanswered, a PS behind a
  // job's start-up storm, moves the deadline on within `cap`, and the next ask waits twice
  // as long (fewer asks queued at a PS that is already slow).
  core::Expected<int32_t> port = make_error(Errc::internal, "no reply");
  caf::actor a;
  int links = 0, asks = 0;
  auto ask_bound = options_.connect_timeout;
  while (!port) {
    if (!a || net::is_terminated(a)) {
      auto made = net::connect_with_retry(
          sys_, options_.cluster.address(id), id.to_string(), left(), give_up,
          {timeout, std::chrono::duration_cast<std::chrono::milliseconds>(
                        cap - std::chrono::steady_clock::now())});
      if (!made) return unreachable(made.error());
      a = *made;
      ++links;
      deadline = std::min(std::chrono::steady_clock::now() + timeout, cap);
    }
    ++asks;
    bool timed_out = false;
    self_->request(a, std::min(left(), ask_bound), net::channel_atom::value)
        .receive([&](int32_t p) { port = p; },
                 [&](caf::error& e) {
                   timed_out = e == caf::sec::request_timeout;
                   port = net::from_caf(e);
                 });
    if (port || give_up()) break;
    if (first && timed_out && !net::is_terminated(a)) {
      deadline = std::min(std::chrono::steady_clock::now() + timeout, cap);
      ask_bound *= 2;
    }
    if (std::chrono::steady_clock::now() >= deadline || (!timed_out && !net::is_terminated(a)))
      break;
  }
  if (!port)
    return unreachable(make_error(
        Errc::unavailable, id.to_string() + " did not answer (" + std::to_string(asks) +
                               (asks == 1 ? " ask" : " asks") + " over " + std::to_string(links) +
                               (links == 1 ? " link" : " links") + " in " +
                               std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                                                  std::chrono::steady_clock::now() - start)
                                                  .count()) +
                               " ms): " + port.error().message));
  unreachable_until_.erase(task);
  reached_.insert(task);
  ps_[task] = a;
  channel_ports_[task] = *port;
  return a;
}

void WorkerRuntime::Batch::add(int task, size_t var, size_t shard, net::PsItem item, bool answer) {
  requests[task].items.push_back(std::move(item));
  if (answer)
    slots[task].emplace_back(var, shard);
  else
    slots[task].emplace_back(dropped, dropped);
}

core::Expected<int> WorkerRuntime::serving(const net::Placement& p) const {
  const int32_t task = routing_->primary(p);
  if (task < 0)
    return make_error(Errc::unavailable,
                      "every replica of '" + net::shard_key(p.def) + "' is lost");
  return task;
}

core::Status WorkerRuntime::add_update(Batch& batch, const net::Placement& p, size_t var,
                                       size_t shard, net::PsItem item) const {
  const auto live = routing_->live(p);
  if (live.empty())
    return make_error(Errc::unavailable,
                      "every replica of '" + net::shard_key(p.def) + "' is lost");
  // The backups first, with a copy each; the primary last, with the item itself.
  for (size_t r = 1; r < live.size(); ++r)
    batch.add(live[r], var, shard, item, /*answer=*/false);
  batch.add(live.front(), var, shard, std::move(item));
  return {};
}

core::Expected<net::Socket*> WorkerRuntime::channel(int task) {
  const auto now = std::chrono::steady_clock::now();
  if (auto it = channels_.find(task); it != channels_.end()) {
    if (!it->second.valid()) return nullptr;
    auto& used = channel_used_[task];
    if (now - used < net::channel_idle_timeout / 2) {
      used = now;
      return &it->second;
    }
    channels_.erase(it);  // the PS may be about to end it: a fresh one instead
  }
  if (!options_.tensor_channel) {
    channels_[task];  // invalid: this task's tensors go as CAF messages
    return nullptr;
  }
  auto dst = ps(task);
  if (!dst) return dst.error();
  auto& slot = channels_[task];
  const int32_t port = channel_ports_[task];
  if (port == 0) return nullptr;  // the PS runs without a channel
  const net::TaskId id{"ps", task};
  auto hp = net::parse_host_port(options_.cluster.address(id));
  if (!hp) return hp.error();
  auto socket = net::connect_to(hp->host, static_cast<uint16_t>(port), options_.request_timeout);
  if (!socket) {
    channels_.erase(task);
    return make_error(socket.error().code,
                      id.to_string() + " tensor channel: " + socket.error().message);
  }
  if (!options_.cluster_secret.empty())
    if (auto st = net::authenticate_to(*socket, options_.cluster_secret, options_.request_timeout,
                                       net::links_encrypted(), id.to_string());
        !st) {
      channels_.erase(task);
      return make_error(st.error().code, id.to_string() + " tensor channel: " + st.error().message);
    }
  slot = std::move(*socket);
  channel_used_[task] = now;
  return &slot;
}

void WorkerRuntime::forget(int task) {
  ps_.erase(task);
  channels_.erase(task);
  channel_ports_.erase(task);
}

core::Expected<std::vector<std::vector<net::WireTensor>>> WorkerRuntime::exchange(
    net::PsOp op, Batch& batch, const std::vector<size_t>& shard_counts) {
  using Handle = decltype(self_->request(std::declval<caf::actor&>(), options_.request_timeout,
                                         net::batch_atom::value, net::PsRequest{}));
  struct InFlight {
    int task;
    net::Socket* socket;  // null: the request went as a CAF message
    std::optional<Handle> handle;
  };
  // Send every task's request before awaiting any reply: the PS tasks work in parallel.
  // Each PS reads a whole request before it answers, so writing to one while another
  // answers cannot deadlock.
  if (cancelled())
    return make_error(Errc::cancelled, "closure " + std::to_string(net::tag_closure(closure_id_)) +
                                           " was cancelled");
  std::vector<InFlight> in_flight;
  const uint64_t epoch = batch.epoch;
  core::Status failed;
  auto fail = [&](int task, const core::Error& e) {
    if (e.code == Errc::unavailable || e.code == Errc::data_loss) forget(task);
    if (failed.ok()) failed = core::Error{e.code, "ps:" + std::to_string(task) + ": " + e.message};
  };
  // Reaching a task may take a while (a lost one restarting): if the routing moved on
  // meanwhile, a request may go where its shard no longer is, or is not yet.
  auto still_routed = [&]() -> core::Status {
    if (const uint64_t now = routing_->epoch(); now != epoch)
      return make_error(Errc::unavailable, "the placement moved from epoch " +
                                               std::to_string(epoch) + " to " +
                                               std::to_string(now) + " during the step");
    return {};
  };
  for (auto& [task, request] : batch.requests) {
    request.op = static_cast<uint8_t>(op);
    request.tag = closure_id_;
    request.settled_below = settled_below_;
    request.wire = options_.wire_dtype;
    request.epoch = epoch;
    auto ch = channel(task);
    if (!ch) {
      fail(task, ch.error());
      break;
    }
    if (auto st = still_routed(); !st) {
      fail(task, st.error());
      break;
    }
    if (*ch != nullptr) {
      if (auto st = net::send_request(**ch, request); !st) {
        fail(task, st.error());
        break;
      }
      in_flight.push_back({task, *ch, std::nullopt});
      ++channel_requests_;
    } else {
      auto dst = ps(task);
      if (!dst) {
        fail(task, dst.error());
        break;
      }
      if (auto st = still_routed(); !st) {
        fail(task, st.error());
        break;
      }
      in_flight.push_back({task, nullptr,
                           self_->request(*dst, options_.request_timeout, net::batch_atom::value,
                                          std::move(request))});
      ++caf_requests_;
    }
  }
  // Collect every reply that was asked for, even after a failure, so that no channel is
  // left with an unread reply in it.
  std::vector<std::vector<net::WireTensor>> out(shard_counts.size());
  for (size_t v = 0; v < shard_counts.size(); ++v)
    out[v].resize(shard_counts[v]);
  for (auto& f : in_flight) {
    core::Expected<std::vector<net::PsItem>> items = make_error(Errc::internal, "no reply");
    if (f.socket != nullptr) {
      items = net::recv_reply(*f.socket);
    } else {
      f.handle->receive([&](std::vector<net::PsItem>& v) { items = std::move(v); },
                        [&](caf::error& e) { items = net::from_caf(e); });
    }
    if (!items) {
      fail(f.task, items.error());
      continue;
    }
    const auto& slots = batch.slots[f.task];
    if (items->size() != slots.size()) {
      fail(f.task, make_error(Errc::data_loss, "answered " + std::to_string(items->size()) +
                                                   " items for " + std::to_string(slots.size())));
      continue;
    }
    for (size_t k = 0; k < slots.size(); ++k)
      if (slots[k].first != Batch::dropped)
        out[slots[k].first][slots[k].second] = std::move((*items)[k].tensor);
  }
  if (!failed.ok()) return failed.error();
  return out;
}

namespace {

// Each variable whole from its shards' parts, laid out by `strides[i]` (its row_stride).
core::Expected<std::vector<core::Tensor>> concat_all(
    const std::vector<std::vector<net::WireTensor>>& parts, const std::vector<int64_t>& strides) {
  std::vector<core::Tensor> out;
  for (size_t i = 0; i < parts.size(); ++i) {
    auto whole = net::concat_shards(parts[i], i < strides.size() ? strides[i] : 1);
    if (!whole) return whole.error();
    out.push_back(std::move(*whole));
  }
  return out;
}

// The rows of `grad` that `p` holds, as a tensor for the wire.
core::Expected<net::WireTensor> shard_part(const std::string& name, core::ConstTensorView grad,
                                           const net::Placement& p) {
  if (grad.shape().rank() == 0) return net::WireTensor::from(grad);
  const int64_t last =
      p.def.row_offset + (net::shard_row_count(p.def) - 1) * std::max<int64_t>(1, p.def.row_stride);
  if (last >= grad.shape()[0])
    return make_error(Errc::invalid_argument, "gradient of '" + name + "' has too few rows");
  if (p.def.row_stride <= 1) return net::WireTensor::from(grad.rows(p.def.row_offset, last + 1));
  return net::WireTensor::from(net::part_for_shard(grad, p.def));
}

}  // namespace

core::Expected<std::vector<core::Tensor>> WorkerRuntime::pull(
    const std::vector<std::string>& names) {
  return across_failover([&] { return pull_once(names); });
}

core::Expected<std::vector<core::Tensor>> WorkerRuntime::pull_once(
    const std::vector<std::string>& names) {
  Batch batch = new_batch();
  std::vector<size_t> counts;
  std::vector<int64_t> strides;
  for (size_t i = 0; i < names.size(); ++i) {
    auto shards = shards_of(names[i]);
    if (!shards) return shards.error();
    counts.push_back((*shards)->size());
    strides.push_back((*shards)->empty() ? 1 : (*shards)->front().def.row_stride);
    for (size_t k = 0; k < (*shards)->size(); ++k) {
      auto task = serving((**shards)[k]);
      if (!task) return task.error();
      batch.add(*task, i, k, net::PsItem{net::shard_key((**shards)[k].def), {}, {}});
    }
  }
  auto parts = exchange(net::PsOp::pull, batch, counts);
  if (!parts) return parts.error();
  return concat_all(*parts, strides);
}

core::Expected<std::vector<std::vector<net::WireTensor>>> WorkerRuntime::send_gradients(
    net::PsOp op, const std::vector<std::pair<std::string, core::ConstTensorView>>& grads) {
  return across_failover([&] { return send_gradients_once(op, grads); });
}

core::Expected<std::vector<std::vector<net::WireTensor>>> WorkerRuntime::send_gradients_once(
    net::PsOp op, const std::vector<std::pair<std::string, core::ConstTensorView>>& grads) {
  Batch batch = new_batch();
  std::vector<size_t> counts;
  for (size_t i = 0; i < grads.size(); ++i) {
    auto shards = shards_of(grads[i].first);
    if (!shards) return shards.error();
    counts.push_back((*shards)->size());
    for (size_t k = 0; k < (*shards)->size(); ++k) {
      const net::Placement& p = (**shards)[k];
      auto part = shard_part(grads[i].first, grads[i].second, p);
      if (!part) return part.error();
      if (auto st =
              add_update(batch, p, i, k, net::PsItem{net::shard_key(p.def), {}, std::move(*part)});
          !st)
        return st.error();
    }
  }
  return exchange(op, batch, counts);
}

core::Status WorkerRuntime::push(
    const std::vector<std::pair<std::string, core::ConstTensorView>>& grads) {
  auto acks = send_gradients(net::PsOp::push, grads);
  if (!acks) return acks.error();
  return {};
}

core::Expected<std::vector<core::Tensor>> WorkerRuntime::push_pull(
    const std::vector<std::pair<std::string, core::ConstTensorView>>& grads) {
  auto parts = send_gradients(net::PsOp::push_pull, grads);
  if (!parts) return parts.error();
  std::vector<int64_t> strides;
  for (const auto& g : grads) {
    auto shards = shards_of(g.first);
    strides.push_back(shards && !(*shards)->empty() ? (*shards)->front().def.row_stride : 1);
  }
  return concat_all(*parts, strides);
}

core::Expected<std::vector<core::Tensor>> WorkerRuntime::pull_rows(
    const std::vector<RowsOf>& vars) {
  return across_failover([&] { return pull_rows_once(vars); });
}

core::Expected<std::vector<core::Tensor>> WorkerRuntime::pull_rows_once(
    const std::vector<RowsOf>& vars) {
  Batch batch = new_batch();
  std::vector<const Shards*> shards(vars.size());
  std::vector<net::RowRoute> routes;
  std::vector<size_t> counts;
  for (size_t i = 0; i < vars.size(); ++i) {
    auto found = shards_of(vars[i].name);
    if (!found) return found.error();
    const Shards& s = **found;
    shards[i] = &s;
    auto route = net::route_rows(vars[i].name, s, *vars[i].rows);
    if (!route) return route.error();
    for (size_t shard = 0; shard < s.size(); ++shard) {
      if (route->local[shard].empty()) continue;
      auto task = serving(s[shard]);
      if (!task) return task.error();
      batch.add(*task, i, shard,
                net::PsItem{net::shard_key(s[shard].def), route->local[shard], {}});
    }
    routes.push_back(std::move(*route));
    counts.push_back(s.size());
  }
  auto parts = exchange(net::PsOp::pull_rows, batch, counts);
  if (!parts) return parts.error();
  std::vector<core::Tensor> out;
  for (size_t i = 0; i < vars.size(); ++i) {
    std::vector<int64_t> dims = shards[i]->front().def.shape;
    dims[0] = static_cast<int64_t>(vars[i].rows->size());
    core::Tensor rows{core::Shape(dims)};
    std::vector<const net::WireTensor*> answered;
    for (const auto& part : (*parts)[i])
      answered.push_back(&part);
    if (auto st = net::gather_routed(vars[i].name, routes[i], answered, rows); !st)
      return st.error();
    out.push_back(std::move(rows));
  }
  return out;
}

core::Status WorkerRuntime::push_rows(const std::vector<RowsOf>& vars) {
  return across_failover([&] { return push_rows_once(vars); });
}

core::Status WorkerRuntime::push_rows_once(const std::vector<RowsOf>& vars) {
  Batch batch = new_batch();
  std::vector<size_t> counts;
  for (size_t i = 0; i < vars.size(); ++i) {
    const std::string& name = vars[i].name;
    const std::vector<int64_t>& rows = *vars[i].rows;
    const core::ConstTensorView grads = vars[i].grads;
    auto found = shards_of(name);
    if (!found) return found.error();
    const Shards& s = **found;
    const int64_t width = grads.shape().row_size();
    if (grads.shape().rank() < 1 || grads.shape()[0] != static_cast<int64_t>(rows.size()))
      return make_error(Errc::invalid_argument,
                        "row gradient of '" + name + "' does not match its rows");
    auto route = net::route_rows(name, s, rows);
    if (!route) return route.error();
    for (size_t shard = 0; shard < s.size(); ++shard) {
      if (route->local[shard].empty()) continue;
      net::PsItem item;
      item.name = net::shard_key(s[shard].def);
      item.tensor.data = net::routed_part(*route, shard, grads);
      item.rows = std::move(route->local[shard]);
      item.tensor.dims = {static_cast<int64_t>(item.rows.size()), width};
      if (auto st = add_update(batch, s[shard], i, shard, std::move(item)); !st) return st.error();
    }
    counts.push_back(s.size());
  }
  auto acks = exchange(net::PsOp::push_rows, batch, counts);
  if (!acks) return acks.error();
  return {};
}

}  // namespace troupe::actors
