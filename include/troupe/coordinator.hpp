#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "troupe/codec.hpp"
#include "troupe/coordinator_types.hpp"
#include "troupe/registry.hpp"
#include "troupe/remote_value.hpp"
#include "troupe/strategy.hpp"

namespace troupe {

/// TensorFlow's ClusterCoordinator: schedules closures (a registered step and its
/// arguments) on the workers and returns at once with a RemoteValue.
///
///   auto coord = ClusterCoordinator::make(*strategy).value();
///   auto ds = coord->create_per_worker_dataset("train").value();
///   for (int i = 0; i < steps; ++i) coord->schedule_no_result("train_step", ds);
///   coord->join();
class ClusterCoordinator {
 public:
  using Options = CoordinatorOptions;
  using Stats = CoordinatorStats;

  /// Connects to every worker (retrying until the strategy's connect timeout) and sends
  /// them the variable placement.
  static core::Expected<std::unique_ptr<ClusterCoordinator>> make(ParameterServerStrategy& strategy,
                                                                  CoordinatorOptions options = {});
  /// Ends the coordinator: closures still pending settle `cancelled`, so a RemoteValue
  /// that outlives it never waits forever.
  ~ClusterCoordinator();

  /// Schedules `step(args...)` on some worker; its result arrives in the RemoteValue.
  /// While an earlier closure's error is pending (join() has not raised it yet), nothing
  /// is scheduled and the RemoteValue holds that error at once, as TensorFlow's schedule()
  /// raises it. With `max_pending_closures`, waits for room first (back-pressure).
  template <class T, class... A>
  RemoteValue<T> schedule(const std::string& step, const A&... args) {
    auto state = std::make_shared<detail::RemoteState>();
    enqueue(step, encode_args(args...), state, 1);
    return RemoteValue<T>(state);
  }
  /// As schedule, running the step `steps_per_execution` times in one closure; the result
  /// is the last run's.
  template <class T, class... A>
  RemoteValue<T> schedule_repeated(const std::string& step, uint32_t steps_per_execution,
                                   const A&... args) {
    auto state = std::make_shared<detail::RemoteState>();
    enqueue(step, encode_args(args...), state, steps_per_execution);
    return RemoteValue<T>(state);
  }
  /// As schedule, without keeping the result (cheaper); `steps_per_execution` runs the
  /// step that many times in one closure. Returns the pending error instead of scheduling
  /// while there is one.
  template <class... A>
  core::Status schedule_no_result(const std::string& step, uint32_t steps_per_execution,
                                  const A&... args) {
    return enqueue(step, encode_args(args...), nullptr, steps_per_execution);
  }
  /// Waits until every scheduled closure has finished; returns the first application
  /// error since the last join (then clears it). The first error cancels what is queued
  /// and what is running, so join() returns soon after it, not after the longest closure.
  core::Status join();
  /// True when nothing scheduled is still pending.
  bool done();
  /// Waits at most `timeout` until nothing scheduled is pending; returns whether that is
  /// so. A caller that must stay responsive (to Ctrl-C, say) waits in slices, then joins.
  bool wait_done(std::chrono::milliseconds timeout);
  Stats stats();
  /// The incarnation its closure ids carry (CoordinatorOptions::incarnation, or the one
  /// drawn for it).
  uint32_t incarnation() const;
  /// Waits at most `timeout` until the counters satisfy `pred` (say, a lost worker has
  /// rejoined); returns whether they do.
  bool wait_for_stats(const std::function<bool(const Stats&)>& pred,
                      std::chrono::milliseconds timeout);

  /// A per-worker dataset: every worker builds its own iterator of the registered dataset
  /// function now (with its InputContext); pass the result to schedule(). A name no
  /// worker knows is a not_found error. `args` go to a function registered with
  /// Registry::add_dataset_with_args on each worker, and again to a worker that rejoins.
  core::Expected<PerWorkerDataset> create_per_worker_dataset(
      const std::string& name, const std::vector<char>& args = {}) const;

  /// Tells every worker and PS task to stop serving (end of job) and waits for each to
  /// acknowledge (3 s each; 3 s more to reach one lost or not connected yet). An error
  /// names the tasks that did not (stopped, lost, or unreachable): they may still be
  /// serving, for their launcher to end.
  core::Status shutdown_cluster();

  struct Impl;

 private:
  explicit ClusterCoordinator(std::unique_ptr<Impl> impl);
  core::Status enqueue(const std::string& step, std::vector<char> args,
                       std::shared_ptr<detail::RemoteState> state, uint32_t repeat);
  std::unique_ptr<Impl> impl_;
};

}  // namespace troupe
