#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "actors/ps_routing.hpp"
#include "core/runtime/registry.hpp"
#include "net/channel.hpp"
#include "net/cluster_spec.hpp"
#include "net/wire.hpp"

namespace troupe::actors {

struct WorkerOptions {
  int index = 0;
  net::ClusterSpec cluster;
  const Registry* registry = nullptr;
  /// Bound on every request to a PS shard.
  std::chrono::milliseconds request_timeout{30000};
  /// How long a reconnection to a PS shard (and its first answer) is waited for before the
  /// closure fails: a dropped handshake or a brief restart. The first connection to each
  /// PS task, made while the job starts, is tried until the chief declares that PS lost
  /// (within 4 x request_timeout).
  std::chrono::milliseconds connect_timeout{3000};
  /// Send tensors through the PS tasks' tensor channels (when they have one).
  bool tensor_channel = true;
  /// The channel's type for pulled values and pushed gradients: bf16 halves the bytes and
  /// rounds the values (the PS keeps float32). CAF messages stay float32.
  net::WireDtype wire_dtype = net::WireDtype::float32;
  /// The job's secret: each channel connection proves it and checks the PS's proof
  /// (net/auth.hpp). Empty: connections are not authenticated.
  std::string cluster_secret;
  /// Batches each dataset_iterator makes ahead of the requests (0: on request only).
  size_t prefetch = 8;
  /// Batches taken from a dataset_iterator per request: one thread hand-off per this many
  /// steps rather than one per step.
  size_t batches_per_request = 8;
  /// Bound on building a dataset and on each request for batches: past it the call fails
  /// (unavailable, naming the dataset) and the iterator is dropped, to be built afresh by
  /// the next call. The chief's closure_timeout, when shorter, takes the worker back
  /// first; this bound frees the worker's thread from a dataset function that never returns.
  std::chrono::milliseconds dataset_timeout{600000};
};

/// Closures the coordinator has cancelled, shared by the worker's control actor (which
/// receives the cancel message while the worker runs a step) and the worker's thread.
/// One number per worker: every closure id of the same chief incarnation up to it.
class CancelMark {
 public:
  void raise(uint64_t through) {
    uint64_t seen = through_.load();
    // A later incarnation replaces an earlier one; within one, the mark only rises.
    while ((seen >> 32 != through >> 32 || seen < through) &&
           !through_.compare_exchange_weak(seen, through)) {
    }
  }
  bool covers(uint64_t closure_id) const {
    const uint64_t t = through_.load(std::memory_order_relaxed);
    return t != 0 && (t >> 32) == (closure_id >> 32) && closure_id <= t;
  }

 private:
  std::atomic<uint64_t> through_{0};
};

/// A worker's control actor: takes (cancel, through_id) and (failover, epoch, lost) while
/// the worker is busy; the running step sees either at its next PS request.
caf::behavior worker_control(caf::event_based_actor* self, std::shared_ptr<CancelMark> mark,
                             std::shared_ptr<PsRouting> routing);

/// The worker's side of a step: parameter-server access fanned out over the shards, and the
/// worker's dataset iterators. Lives on the worker actor's thread.
class WorkerRuntime final : public StepContext {
 public:
  WorkerRuntime(caf::actor_system& sys, WorkerOptions options,
                std::shared_ptr<const CancelMark> cancel = nullptr,
                std::shared_ptr<const PsRouting> routing = nullptr);
  ~WorkerRuntime() override;
  WorkerRuntime(const WorkerRuntime&) = delete;
  WorkerRuntime& operator=(const WorkerRuntime&) = delete;

  /// Installs the variable placement the coordinator sends before the first closure.
  core::Status set_placements(const std::vector<net::Placement>& placements);
  /// Builds (or rebuilds) this worker's iterator of a registered dataset: a
  /// dataset_iterator actor, prefetching. `request` is the dataset's name, or its creation
  /// with arguments (troupe::dataset_request), which are kept for rebuilding it by name.
  core::Status build_dataset(const std::string& request);
  /// Runs one closure: looks up its step by name and calls it. Exceptions thrown by user
  /// code become `internal` errors; nothing escapes.
  core::Expected<std::vector<char>> run(const net::ClosureMsg& closure);

  int worker_index() const override { return options_.index; }
  uint64_t closure_id() const override { return closure_id_; }
  bool cancelled() const override;
  core::Expected<std::vector<core::Tensor>> pull(const std::vector<std::string>& names) override;
  core::Status push(
      const std::vector<std::pair<std::string, core::ConstTensorView>>& grads) override;
  core::Expected<std::vector<core::Tensor>> push_pull(
      const std::vector<std::pair<std::string, core::ConstTensorView>>& grads) override;
  using StepContext::pull_rows;
  using StepContext::push_rows;
  core::Expected<std::vector<core::Tensor>> pull_rows(const std::vector<RowsOf>& vars) override;
  core::Status push_rows(const std::vector<RowsOf>& vars) override;
  core::Expected<std::optional<core::Batch>> next_batch(const PerWorkerDataset& ds) override;

  int64_t closures_run() const { return closures_run_; }
  /// PS requests sent through the tensor channel, and as CAF messages.
  int64_t channel_requests() const { return channel_requests_; }
  int64_t caf_requests() const { return caf_requests_; }
  /// Pulls and pushes made again, routed anew, across a failover (across_failover()).
  int64_t rerouted() const { return rerouted_; }

 private:
  using Shards = std::vector<net::Placement>;  // ordered by shard index
  core::Expected<const Shards*> shards_of(const std::string& name) const;
  /// The PS task's actor, connected (and asked for its channel port) on first use.
  core::Expected<caf::actor> ps(int task);
  /// The tensor channel to a PS task, connected on first use; nullptr when its tensors go
  /// as CAF messages (the option is off or the PS announces no channel).
  core::Expected<net::Socket*> channel(int task);
  /// Drops the connections to a PS task after a transport failure; the next use reconnects.
  void forget(int task);
  /// Ends the iterator of dataset `name` (after a timed-out call); the next call builds it
  /// afresh.
  void drop_iterator(const std::string& name);
  /// One request per PS task, and where each reply item goes: (variable, shard); a
  /// backup's items are applied there and their replies dropped (not in `slots`).
  struct Batch {
    std::map<int, net::PsRequest> requests;
    std::map<int, std::vector<std::pair<size_t, size_t>>> slots;
    static constexpr size_t dropped = static_cast<size_t>(-1);  // a backup's item: no slot
    uint64_t epoch = 0;  // the routing's epoch when its tasks were chosen
    void add(int task, size_t var, size_t shard, net::PsItem item, bool answer = true);
  };
  /// An empty batch, routed by the routing's epoch as of now.
  Batch new_batch() const {
    Batch b;
    b.epoch = routing_->epoch();
    return b;
  }
  /// The task a shard's pulls go to now; an `unavailable` error when every replica is lost.
  core::Expected<int> serving(const net::Placement& p) const;
  /// Adds an update of shard (var, shard) to every live replica of `p`; the primary's reply
  /// is the caller's.
  core::Status add_update(Batch& batch, const net::Placement& p, size_t var, size_t shard,
                          net::PsItem item) const;
  /// Sends every task's request with `op` and the current closure tag, then collects the
  /// replies: [variable][shard] tensors, sized by `shard_counts`.
  core::Expected<std::vector<std::vector<net::WireTensor>>> exchange(
      net::PsOp op, Batch& batch, const std::vector<size_t>& shard_counts);
  /// Each gradient's shard parts, sent with `op` (push or push_pull) through exchange().
  core::Expected<std::vector<std::vector<net::WireTensor>>> send_gradients(
      net::PsOp op, const std::vector<std::pair<std::string, core::ConstTensorView>>& grads);
  /// Each public pull and push, made once: routed as the routing stands when it is made.
  core::Expected<std::vector<core::Tensor>> pull_once(const std::vector<std::string>& names);
  core::Expected<std::vector<std::vector<net::WireTensor>>> send_gradients_once(
      net::PsOp op, const std::vector<std::pair<std::string, core::ConstTensorView>>& grads);
  core::Expected<std::vector<core::Tensor>> pull_rows_once(const std::vector<RowsOf>& vars);
  core::Status push_rows_once(const std::vector<RowsOf>& vars);
  /// `attempt()` (a pull or push, routed when it is made), made again across a failover:
  /// see worker_ps.cpp.
  template <class Attempt>
  auto across_failover(Attempt&& attempt) -> decltype(attempt());

  caf::actor_system& sys_;
  WorkerOptions options_;
  caf::scoped_actor self_;
  std::map<std::string, Shards> placements_;
  bool replicated_ = false;  // some shard has a backup: a lost PS task is failed over
  std::map<int, caf::actor> ps_;
  std::map<int, int32_t> channel_ports_;  // as each PS announced it; 0: no channel
  std::map<int, net::Socket> channels_;
  /// When each channel was last used: one idle for half of net::channel_idle_timeout is
  /// replaced before the PS could have ended it.
  std::map<int, std::chrono::steady_clock::time_point> channel_used_;
  /// After a failed connection to a PS, further attempts fail at once until then.
  /// (A new routing epoch ends the wait: the task may be the one that just rejoined.)
  struct Backoff {
    std::chrono::steady_clock::time_point until;
    uint64_t epoch = 0;
  };
  std::map<int, Backoff> unreachable_until_;
  static constexpr std::chrono::milliseconds unreachable_backoff{200};
  /// PS tasks this runtime has reached once. The first connection to one is made while
  /// the whole job starts (every task dialling at once, on a loaded machine: slow, not
  /// lost), so it is tried until the chief declares the PS lost, within
  /// first_reach_bound(); a reconnection after a failure, connect_timeout.
  std::set<int> reached_;
  std::chrono::milliseconds first_reach_bound() const { return 4 * options_.request_timeout; }
  /// A dataset_iterator actor and the batches it has handed over that no step took yet.
  struct Iterator {
    caf::actor actor;
    std::deque<core::Batch> buffered;
    bool ended = false;
  };
  std::map<std::string, Iterator> iterators_;    // by dataset
  std::map<std::string, std::string> requests_;  // by dataset: its creation, with arguments
  std::shared_ptr<const CancelMark> cancel_;
  std::shared_ptr<const PsRouting> routing_;  // which replica serves each shard now
  uint64_t closure_id_ = 0;
  uint64_t settled_below_ = 0;  // the running closure's ClosureMsg::settled_below
  int64_t closures_run_ = 0;
  int64_t channel_requests_ = 0, caf_requests_ = 0;
  int64_t rerouted_ = 0;  // pulls and pushes made again across a failover
};

/// The worker actor (blocking: it runs steps on its own thread, never on the scheduler's).
///   (vars, [Placement])   -> the worker's control actor (where cancel messages go)
///   (dataset, name)       -> ok once this worker's iterator of the dataset is built
///   (run, ClosureMsg)     -> msgpack bytes of the step's result, or the step's error;
///                            `cancelled` for a closure cancelled before or while it ran
///   (stats)               -> [closures run, PS requests by channel, PS requests by CAF]
///   (shutdown)            -> the actor quits
void worker(caf::blocking_actor* self, WorkerOptions options);

}  // namespace troupe::actors
