#include "actors/worker.hpp"

#include "net/auth.hpp"

#include <algorithm>
#include <exception>
#include <iostream>

#include <caf/io/all.hpp>

#include "actors/dataset_iterator.hpp"
#include "core/partitioner.hpp"
#include "net/ask.hpp"
#include "net/connect.hpp"

namespace troupe::actors {

using core::Errc;
using core::make_error;

caf::behavior worker_control(caf::event_based_actor*, std::shared_ptr<CancelMark> mark,
                             std::shared_ptr<PsRouting> routing) {
  return {
      [=](net::cancel_atom, uint64_t through) { mark->raise(through); },
      [=](net::failover_atom, uint64_t epoch, std::vector<int32_t>& lost,
          std::vector<int32_t>& joining) {
        routing->update(epoch, std::move(lost), std::move(joining));
      },
  };
}

WorkerRuntime::WorkerRuntime(caf::actor_system& sys, WorkerOptions options,
                             std::shared_ptr<const CancelMark> cancel,
                             std::shared_ptr<const PsRouting> routing)
    : sys_(sys),
      options_(std::move(options)),
      self_(sys),
      cancel_(std::move(cancel)),
      routing_(routing ? std::move(routing) : std::make_shared<PsRouting>()) {}

bool WorkerRuntime::cancelled() const {
  return cancel_ && closure_id_ != 0 && cancel_->covers(net::tag_closure(closure_id_));
}

core::Status WorkerRuntime::build_dataset(const std::string& request) {
  auto [name, args] = split_dataset_request(request);
  if (args.empty()) {  // rebuilt by name (after a timed-out call): with the arguments it had
    if (auto it = requests_.find(name); it != requests_.end())
      std::tie(name, args) = split_dataset_request(it->second);
  } else {
    requests_[name] = request;
  }
  const auto* fn = options_.registry->dataset(name);
  if (fn == nullptr)
    return make_error(Errc::not_found, "no dataset function '" + name + "' registered");
  DatasetIteratorOptions o;
  o.name = name;
  o.fn = *fn;
  o.args = std::move(args);
  o.context.num_input_pipelines = std::max(1, options_.cluster.num_tasks("worker"));
  o.context.input_pipeline_id = options_.index;
  o.context.num_replicas_in_sync = 1;
  o.prefetch = options_.prefetch;
  // Rebuilding replaces the iterator: the old actor ends and what it handed over is
  // dropped; the new one starts from the top.
  if (auto it = iterators_.find(name); it != iterators_.end())
    caf::anon_send(it->second.actor, net::shutdown_atom::value);
  auto actor = sys_.spawn<caf::detached>(dataset_iterator, std::move(o));
  iterators_[name] = Iterator{actor, {}, false};
  // Wait until the dataset is built (asking for no batches), so that building it (reading
  // and decoding files) happens here, before training, and a failing dataset function is
  // reported now.
  bool timed_out = false;
  const core::Status built = net::ask(
      *self_, actor,
      {options_.dataset_timeout, "building dataset '" + name + "' on this worker", &timed_out},
      [](BatchMsg&) {}, next_atom::value, uint32_t{0});
  if (timed_out) drop_iterator(name);
  return built;
}

void WorkerRuntime::drop_iterator(const std::string& name) {
  // A call to it timed out, and its answer may still come (a dataset function stuck past
  // the bound, then done): the next call starts a fresh iterator rather than read on.
  if (auto it = iterators_.find(name); it != iterators_.end()) {
    caf::anon_send(it->second.actor, net::shutdown_atom::value);
    iterators_.erase(it);
  }
}

core::Expected<std::optional<core::Batch>> WorkerRuntime::next_batch(const PerWorkerDataset& ds) {
  auto it = iterators_.find(ds.name);
  if (it == iterators_.end()) {
    if (auto st = build_dataset(ds.name); !st) return st.error();
    it = iterators_.find(ds.name);
  }
  Iterator& iter = it->second;
  if (iter.buffered.empty() && !iter.ended) {
    bool timed_out = false;
    const core::Status got = net::ask(
        *self_, iter.actor,
        {options_.dataset_timeout, "next batch of dataset '" + ds.name + "'", &timed_out},
        [&](BatchMsg& m) {
          for (auto& b : m.batches)
            iter.buffered.push_back(std::move(b));
          iter.ended = m.ended;
        },
        next_atom::value, static_cast<uint32_t>(std::max<size_t>(1, options_.batches_per_request)));
    if (timed_out) drop_iterator(ds.name);
    if (!got) return got.error();
  }
  if (iter.buffered.empty()) return std::optional<core::Batch>{};  // the data has ended
  std::optional<core::Batch> b = std::move(iter.buffered.front());
  iter.buffered.pop_front();
  return b;
}

WorkerRuntime::~WorkerRuntime() {
  for (auto& [name, iter] : iterators_)
    caf::anon_send(iter.actor, net::shutdown_atom::value);
}

core::Expected<std::vector<char>> WorkerRuntime::run(const net::ClosureMsg& closure) {
  const auto* step = options_.registry->step(closure.step);
  if (step == nullptr)
    return make_error(Errc::not_found, "no step '" + closure.step + "' registered on this worker");
  if (closure.repeat < 1 || closure.repeat > 0xffff || closure.id >= (uint64_t{1} << 47))
    return make_error(Errc::invalid_argument,
                      "closure " + std::to_string(closure.id) + ": bad id or repeat count");
  const auto cancelled_error = [&] {
    return make_error(Errc::cancelled, "closure " + std::to_string(closure.id) + " was cancelled");
  };
  // Cancelled while it waited in the mailbox: dropped unrun.
  if (cancel_ && cancel_->covers(closure.id)) return cancelled_error();
  ++closures_run_;
  settled_below_ = closure.settled_below;
  try {
    // Each repetition tags its pushes with its own id, so that a shard applies every
    // repetition once and a retried closure's repetitions are recognised.
    core::Expected<std::vector<char>> result = make_error(Errc::internal, "no step ran");
    for (uint32_t k = 0; k < closure.repeat; ++k) {
      closure_id_ = (closure.id << 16) | k;
      if (cancelled()) return cancelled_error();
      result = (*step)(*this, closure.args);
      if (!result) break;
    }
    // A step that returned anything after its cancellation was cut short by it.
    if (cancelled()) return cancelled_error();
    return result;
  } catch (const core::BadExpectedAccess& e) {
    // value() of an error in the step: that error is the step's outcome.
    return make_error(e.error().code,
                      "step '" + closure.step + "' took value() of an error: " + e.error().message);
  } catch (const std::exception& e) {
    return make_error(Errc::internal, "step '" + closure.step + "' threw: " + e.what());
  } catch (...) {
    return make_error(Errc::internal, "step '" + closure.step + "' threw a non-exception");
  }
}

void worker(caf::blocking_actor* self, WorkerOptions options) {
  auto mark = std::make_shared<CancelMark>();
  auto routing = std::make_shared<PsRouting>();
  auto control = self->system().spawn(worker_control, mark, routing);
  const int index = options.index;
  WorkerRuntime rt(self->system(), std::move(options), mark, routing);
  bool running = true;
  // The control actor ends with the worker, whichever way it ends.
  struct EndControl {
    caf::actor a;
    ~EndControl() { caf::anon_send_exit(a, caf::exit_reason::user_shutdown); }
  } end_control{control};
  self->receive_while(running)(
      [&](net::vars_atom, const std::vector<net::Placement>& p) -> caf::result<caf::actor> {
        if (auto st = rt.set_placements(p); !st) return net::to_caf(st.error());
        return control;
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
      [&](net::stats_atom) {
        return std::vector<int64_t>{rt.closures_run(), rt.channel_requests(), rt.caf_requests(),
                                    rt.rerouted()};
      },
      [&](net::shutdown_atom) {
        running = false;
        // In the task's log: whether a shutdown the chief calls silent reached it.
        std::cerr << "troupe: worker:" << index << " acknowledges the shutdown" << std::endl;
        return caf::ok_atom::value;  // acknowledged: the chief may exit now
      },
      // An exit message other than `normal` ends the worker with that reason: its node
      // supervisor sees a failure and starts a fresh one.
      [&](caf::exit_msg& em) {
        if (!em.reason || em.reason == caf::exit_reason::normal) return;
        self->fail_state(std::move(em.reason));
        running = false;
      });
}

}  // namespace troupe::actors
