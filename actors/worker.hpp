#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "net/cluster_spec.hpp"
#include "net/wire.hpp"
#include "troupe/registry.hpp"

namespace troupe::actors {

struct WorkerOptions {
  int index = 0;
  net::ClusterSpec cluster;
  const Registry* registry = nullptr;
  /// Bound on every request to a PS shard.
  std::chrono::milliseconds request_timeout{30000};
  /// How long a connection to a PS shard is retried before the closure fails. The chief has
  /// reached every shard before any closure runs, so this covers a dropped handshake or a
  /// brief restart, not a start-up.
  std::chrono::milliseconds connect_timeout{3000};
};

/// The worker's side of a step: parameter-server access fanned out over the shards, and the
/// worker's dataset iterators. Lives on the worker actor's thread.
class WorkerRuntime final : public StepContext {
 public:
  WorkerRuntime(caf::actor_system& sys, WorkerOptions options);

  /// Installs the variable placement the coordinator sends before the first closure.
  core::Status set_placements(const std::vector<net::Placement>& placements);
  /// Builds (or rebuilds) this worker's iterator of the registered dataset `name`.
  core::Status build_dataset(const std::string& name);
  /// Runs one closure: looks up its step by name and calls it. Exceptions thrown by user
  /// code become `internal` errors; nothing escapes.
  core::Expected<std::vector<char>> run(const net::ClosureMsg& closure);

  int worker_index() const override { return options_.index; }
  uint64_t closure_id() const override { return closure_id_; }
  core::Expected<std::vector<core::Tensor>> pull(const std::vector<std::string>& names) override;
  core::Status push(
      const std::vector<std::pair<std::string, core::ConstTensorView>>& grads) override;
  core::Expected<std::vector<core::Tensor>> push_pull(
      const std::vector<std::pair<std::string, core::ConstTensorView>>& grads) override;
  core::Expected<core::Tensor> pull_rows(const std::string& name,
                                         const std::vector<int64_t>& rows) override;
  core::Status push_rows(const std::string& name, const std::vector<int64_t>& rows,
                         core::ConstTensorView grads) override;
  core::Expected<std::optional<core::Batch>> next_batch(const PerWorkerDataset& ds) override;

  int64_t closures_run() const { return closures_run_; }

 private:
  using Shards = std::vector<net::Placement>;  // ordered by shard index
  core::Expected<const Shards*> shards_of(const std::string& name) const;
  core::Expected<caf::actor> ps(int task);
  template <class T, class... Ts>
  core::Expected<T> ask(const caf::actor& dst, Ts&&... xs);
  /// One request per shard of each named variable (made by make_request(ps, i, placement)),
  /// all sent before any reply is awaited; replies grouped by variable, in shard order.
  /// Sends each gradient's shard parts with `atom` (push or pushpull) through fan_out.
  template <class Reply, class Atom>
  core::Expected<std::vector<std::vector<Reply>>> send_gradients(
      Atom atom, const std::vector<std::pair<std::string, core::ConstTensorView>>& grads);
  /// The index (in `shards`) of the shard holding `row` of the full variable.
  static core::Expected<size_t> shard_of_row(const std::string& name, const Shards& shards,
                                             int64_t row);
  template <class Reply, class MakeRequest>
  core::Expected<std::vector<std::vector<Reply>>> fan_out(const std::vector<std::string>& names,
                                                          MakeRequest make_request);

  caf::actor_system& sys_;
  WorkerOptions options_;
  caf::scoped_actor self_;
  std::map<std::string, Shards> placements_;
  std::map<int, caf::actor> ps_;
  std::map<std::string, std::unique_ptr<core::Iterator<core::Batch>>> iterators_;
  uint64_t closure_id_ = 0;
  int64_t closures_run_ = 0;
};

/// The worker actor (blocking: it runs steps on its own thread, never on the scheduler's).
///   (vars, [Placement])   -> ok
///   (dataset, name)       -> ok once this worker's iterator of the dataset is built
///   (run, ClosureMsg)     -> msgpack bytes of the step's result, or the step's error
///   (stats)               -> [closures run]
///   (shutdown)            -> the actor quits
void worker(caf::blocking_actor* self, WorkerOptions options);

}  // namespace troupe::actors
