#include "python/src/distribute.hpp"

#include <pybind11/stl.h>

#include <chrono>
#include <functional>
#include <optional>

#include "core/collective/collective.hpp"
#include "core/partitioner.hpp"
#include "net/slurm.hpp"
#include "python/src/errors.hpp"
#include "python/src/interrupt.hpp"
#include "troupe/keras.hpp"
#include "troupe/registry.hpp"
#include "troupe/troupe.hpp"

namespace troupe::python {

namespace {

net::SimpleClusterResolver resolver_of(const Jobs& jobs, const std::string& type, int index) {
  net::ClusterSpec spec(jobs);
  check(spec.validate());
  net::TaskId task{type, index};
  if (!spec.has_job(type) || index < 0 || index >= static_cast<int>(spec.jobs().at(type).size()))
    invalid("task " + task.to_string() + " is not in the cluster");
  return net::SimpleClusterResolver(std::move(spec), std::move(task));
}

// Makes a strategy with the GIL released (making it waits for other tasks), `make` given
// the predicate that says whether Ctrl-C came; raises KeyboardInterrupt if it did.
template <class Make>
auto made_interruptibly(Make make) {
  Interrupt interrupt;
  std::optional<decltype(make(interrupt.predicate()))> made;
  {
    py::gil_scoped_release release;
    made.emplace(make(interrupt.predicate()));
  }
  interrupt.rethrow();
  return take(std::move(*made));
}

std::shared_ptr<const core::Partitioner> partitioner_of(const py::object& p) {
  if (p.is_none()) return nullptr;
  const auto d = p.cast<py::dict>();
  const auto type = d["type"].cast<std::string>();
  if (type == "min_size")
    return std::make_shared<core::MinSizePartitioner>(d["min_shard_bytes"].cast<int64_t>(),
                                                      d["max_shards"].cast<int>());
  if (type == "max_size")
    return std::make_shared<core::MaxSizePartitioner>(d["max_shard_bytes"].cast<int64_t>(),
                                                      d["max_shards"].cast<int>());
  if (type == "fixed")
    return std::make_shared<core::FixedShardsPartitioner>(d["num_shards"].cast<int>());
  invalid("no partitioner '" + type + "'");
}

}  // namespace

Registry& worker_registry() {
  static Registry* registry = [] {
    auto* r = new Registry;  // lives as long as the process: tasks serve from it
    register_keras(*r);
    return r;
  }();
  return *registry;
}

py::dict resolve_cluster() {
  auto r = take(net::TFConfigClusterResolver::from_env(net::default_ps_jobs));
  py::dict d;
  d["cluster"] = r.cluster_spec().jobs();
  d["task_type"] = r.task().type;
  d["task_id"] = r.task().index;
  d["rpc_layer"] = r.rpc_layer();
  return d;
}

void serve_task(const Jobs& jobs, const std::string& type, int index) {
  const auto resolver = resolver_of(jobs, type, index);
  if (type != "ps" && type != "worker")
    invalid("task " + resolver.task().to_string() + ": only ps and worker tasks serve");
  if (resolver.cluster_spec().num_tasks("chief") == 0)
    invalid("task " + resolver.task().to_string() +
            ": the cluster has no chief task, which would give every task its work");
  Interrupt interrupt;  // Ctrl-C ends serving, and join() raises KeyboardInterrupt
  core::Status st;
  {
    py::gil_scoped_release release;
    st = serve(resolver, keras_registry(), {}, interrupt.predicate());
  }
  interrupt.rethrow();
  check(st);
}

PsStrategy::PsStrategy(const Jobs& jobs, const std::string& type, int index,
                       const py::object& partitioner, int ps_replicas) {
  const auto resolver = resolver_of(jobs, type, index);
  auto p = partitioner_of(partitioner);
  StrategyOptions options;
  options.ps_replicas = ps_replicas;
  strategy_ = made_interruptibly([&](std::function<bool()> stop) {
    options.stop = std::move(stop);  // Ctrl-C while reaching the PS tasks
    return ParameterServerStrategy::make(resolver, std::move(p), options);
  });
}

MirroredStrategy::MirroredStrategy(const Jobs& jobs, const std::string& type, int index,
                                   const py::dict& options) {
  const auto resolver = resolver_of(jobs, type, index);
  MirroredOptions o;
  o.communication =
      take(collective::parse_communication(options["communication"].cast<std::string>()));
  o.elastic = options["elastic"].cast<bool>();
  o.min_workers = options["min_workers"].cast<int>();
  auto ms = [](double s) { return std::chrono::milliseconds(static_cast<int64_t>(s * 1000)); };
  o.timeout = ms(options["timeout_s"].cast<double>());
  o.connect_timeout = ms(options["connect_timeout_s"].cast<double>());
  strategy_ = made_interruptibly([&](std::function<bool()> stop) {
    o.stop = std::move(stop);  // Ctrl-C while the ring forms
    return MultiWorkerMirroredStrategy::make(resolver, o);
  });
}

py::dict MirroredStrategy::stats() const {
  const MirroredStats s = strategy_->stats();
  py::dict d;
  d["reforms"] = s.reforms;
  d["workers_lost"] = s.workers_lost;
  d["workers_joined"] = s.workers_joined;
  d["steps_redone"] = s.steps_redone;
  return d;
}

}  // namespace troupe::python
