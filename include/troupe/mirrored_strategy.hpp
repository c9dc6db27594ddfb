#pragma once

// TensorFlow's MultiWorkerMirroredStrategy: every worker runs the same program on its own
// replica of the variables and its own shard of the data, and gradients are all-reduced
// every step, so the replicas stay equal. Elastic mode (beyond TensorFlow) keeps training
// when a worker dies: the others re-form the ring and carry on; a worker that comes back
// is brought up to date and takes part again.
//
//   auto strategy = MultiWorkerMirroredStrategy::make(*resolver, options).value();
//   strategy->mirror(state);  // weights (and optimizer slots): the chief's values everywhere
//   auto data = strategy->distribute_datasets_from_function(
//       [&](const core::InputContext& ctx) { return my_batches(ctx); });
//   while (strategy->step() < steps) {
//     auto done = strategy->run([&](ReplicaContext& ctx) -> core::Status {
//       auto batch = data.next();  ...  compute gradients ...
//       if (auto st = ctx.all_reduce(ReduceOp::mean, grads); !st) return st;
//       return apply_gradients();
//     });
//
// A step's collectives belong to the strategy's collective engine (core/collective/
// engine.hpp): ctx.all_reduce runs one on the step's thread; BucketedAllReduce hands
// buckets of gradients to the engine's thread as the backward pass finishes them, so the
// late layers' gradients are reduced while the earlier layers' are computed.
//     if (!done) fail(done.error());
//   }

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/collective/collective.hpp"
#include "core/collective/engine.hpp"
#include "core/data/dataset.hpp"
#include "core/data/input_context.hpp"
#include "core/expected.hpp"
#include "net/cluster_spec.hpp"

namespace troupe {

enum class ReduceOp { sum, mean };

struct MirroredOptions {
  /// Which all-reduce: AUTO or RING (the CPU ring), or NCCL (builds with CUDA, a GPU per
  /// worker: the host gradients are staged through device memory).
  collective::Communication communication = collective::Communication::automatic;
  /// Where the replicas compute (troupe::select_device): their variables and gradients
  /// live there. On a GPU the gradient buckets are reduced by NCCL when communication is
  /// nccl, or auto and every worker has a GPU of its own (checked when the job starts;
  /// not in elastic mode); otherwise the ring carries them through pinned host memory.
  core::Device device;
  /// NCCL: the GPU this worker uses; -1 takes `device`'s, or its slot modulo the GPUs it
  /// sees for a model on the CPU (host gradients staged through the GPU).
  int gpu_device = -1;
  /// Ring links between two workers on the same host carry the bulk bytes through POSIX
  /// shared memory (RingOptions::shared_memory); off: TCP only.
  bool shared_memory = true;
  /// Gradients smaller than this are packed together into buckets of up to this size
  /// (TensorFlow's CommunicationOptions.bytes_per_pack).
  size_t bytes_per_pack = size_t{4} << 20;
  /// The type gradients travel in between workers (gradient_wire() for the steps that
  /// reduce them; fit() does): float32, or bfloat16 (half the bytes; sums in float32,
  /// every replica ending with the same values). Counts and metrics stay float32.
  core::DType gradient_wire = core::DType::float32;
  /// How long a worker waits for the others in a collective before reporting who did not
  /// come (TensorFlow's timeout_seconds; its default is to wait forever).
  std::chrono::milliseconds timeout{60000};
  /// How long the workers have to find each other at start-up.
  std::chrono::milliseconds connect_timeout{30000};
  /// Keep training when workers die (down to min_workers) and take them back.
  bool elastic = false;
  int min_workers = 1;
  /// Elastic: how long the others wait for a worker that neither reports nor dies.
  std::chrono::milliseconds rejoin_timeout{10000};
  /// Asked while make() waits for the other workers (between tries, and at least every
  /// 50 ms of waiting): true ends make() with a `cancelled` error (how Python's Ctrl-C
  /// ends a strategy whose ring is still forming). make() only: the strategy does not
  /// keep it.
  std::function<bool()> stop;
};

class MultiWorkerMirroredStrategy;

/// What a step sees of the replicas (TensorFlow's ReplicaContext).
class ReplicaContext {
 public:
  int replica_id_in_sync_group() const;
  int num_replicas_in_sync() const;
  /// All-reduces the buffers in place across the replicas (tagged with the step, or with
  /// what run_collective() was told). `wire` bfloat16 sends them as bfloat16 (half the
  /// bytes; for gradients, not for counts: AllReduceOptions::wire).
  core::Status all_reduce(ReduceOp op, const std::vector<collective::Buffer>& buffers,
                          core::DType wire = core::DType::float32);
  /// As all_reduce, but on the collective engine's thread: returns at once; the ticket
  /// tells how it ended. The buffers must stay untouched until then. Collectives run in
  /// the order they were submitted (the same on every replica); the step does not end
  /// before they have.
  collective::Engine::Ticket submit_all_reduce(ReduceOp op, std::vector<collective::Buffer> buffers,
                                               core::DType wire = core::DType::float32);
  /// TensorFlow's CommunicationOptions.bytes_per_pack of the strategy.
  size_t bytes_per_pack() const;

 private:
  friend class MultiWorkerMirroredStrategy;
  collective::AllReduceOptions options(ReduceOp op, std::vector<collective::Buffer> buffers,
                                       core::DType wire);
  ReplicaContext(MultiWorkerMirroredStrategy& s, std::string what)
      : s_(s), what_(std::move(what)) {}
  MultiWorkerMirroredStrategy& s_;
  std::string what_;
  bool collective_failed_ = false;
  int collectives_ = 0;
};

/// Reduces a step's gradients while its backward pass goes on (PyTorch DDP's buckets,
/// Horovod's fusion on a background thread). Mark each gradient as the backward pass
/// finishes it (ClassifierTrainer::compute_gradients' callback does, last layer first):
/// marked gradients are packed, in that order, into buckets of bytes_per_pack, and each
/// full bucket goes to the collective engine at once, to be reduced while the earlier
/// layers compute. finish() reduces what is left on the step's thread (every gradient not
/// yet sent, marked or not) and waits for every bucket. Every replica must mark the same
/// gradients in the same order.
///
///   BucketedAllReduce reduce(ctx, ReduceOp::mean, grads);
///   auto loss = trainer.compute_gradients(x, y, [&](size_t i) { reduce.ready(i); });
///   if (auto st = reduce.finish(); !st) return st;
///
/// `wire` bfloat16: every bucket travels as bfloat16 (ReplicaContext::all_reduce).
class BucketedAllReduce {
 public:
  BucketedAllReduce(ReplicaContext& ctx, ReduceOp op, std::vector<collective::Buffer> buffers,
                    core::DType wire = core::DType::float32);
  /// buffers[i] is final (a mark out of range or given twice is an error of finish()).
  void ready(size_t i);
  /// The first failure of any bucket.
  core::Status finish();
  /// Buckets sent to the engine's thread so far (finish()'s own is not one).
  size_t buckets_submitted() const { return tickets_.size(); }

 private:
  ReplicaContext& ctx_;
  ReduceOp op_;
  core::DType wire_;
  std::vector<collective::Buffer> buffers_;
  std::vector<bool> sent_;
  std::vector<collective::Buffer> pending_;
  size_t pending_bytes_ = 0;
  std::vector<collective::Engine::Ticket> tickets_;
  std::string misuse_;
};

/// A worker's input: its shard of the data, rebuilt from the dataset function with the
/// new InputContext whenever the membership has changed (elastic mode).
class MirroredDataset {
 public:
  using Function = std::function<core::Dataset<core::Batch>(const core::InputContext&)>;
  /// The next batch; nullopt when the data ended; the dataset function's error (say, a
  /// file it could not read, taken with value()) when it failed.
  core::Expected<std::optional<core::Batch>> next();

 private:
  friend class MultiWorkerMirroredStrategy;
  MirroredDataset(MultiWorkerMirroredStrategy& s, Function fn) : s_(&s), fn_(std::move(fn)) {}
  MultiWorkerMirroredStrategy* s_;
  Function fn_;
  uint64_t generation_ = ~uint64_t{0};
  std::unique_ptr<core::Iterator<core::Batch>> it_;
};

/// How a run() ended.
enum class StepOutcome {
  done,  // the step ran on every replica
  redo,  // elastic: a worker was lost mid-step; the ring re-formed and every replica holds
         // the state of the one with the most steps (step() says which step is next)
};

/// What elastic mode did.
struct MirroredStats {
  int64_t reforms = 0;
  int64_t workers_lost = 0;
  int64_t workers_joined = 0;
  int64_t steps_redone = 0;  // steps run again after a loss
  /// Of this worker's two ring directions (to the right, from the left), how many go
  /// through shared memory in the current ring (0 to 2).
  int shared_memory_links = 0;
  /// Of its two ring connections, how many carry TLS (TROUPE_TLS): 0 to 2.
  int tls_links = 0;
  /// Bytes this worker sent to its right neighbour in the current ring (headers and
  /// collectives' data: what --wire-dtype bf16 halves).
  uint64_t ring_bytes_sent = 0;
  /// Collectives the engine ran on its own thread (submitted buckets), and on the step's.
  uint64_t collectives_submitted = 0;
  uint64_t collectives_called = 0;
};

class MultiWorkerMirroredStrategy {
 public:
  /// Joins the ring of every chief and worker task in the resolver's cluster (a chief
  /// first, then the workers; PS and evaluator tasks have no part). Waits for all of them
  /// (connect_timeout). An NCCL hint with no NCCL built is an error here.
  static core::Expected<std::unique_ptr<MultiWorkerMirroredStrategy>> make(
      const net::ClusterResolver& resolver, MirroredOptions options = {});
  ~MultiWorkerMirroredStrategy();

  int num_replicas_in_sync() const;
  /// This worker's replica among the current members (changes when members change).
  int worker_index() const;
  /// The chief task, or worker 0 when there is none: it writes the checkpoints.
  bool is_chief() const;
  uint64_t generation() const;
  /// Steps run by every replica so far (run() counts them).
  int64_t step() const { return step_; }
  MirroredStats stats() const;
  core::InputContext input_context() const;
  /// MirroredOptions::gradient_wire.
  core::DType gradient_wire() const;

  /// Keeps these buffers (variables, optimizer slots) equal on every replica: the chief's
  /// values are broadcast now (a process that joins a running job takes the root's), and
  /// after every re-forming the root's. The buffers must outlive the mirroring;
  /// mirror({}) ends it without communicating.
  core::Status mirror(std::vector<collective::Buffer> state);
  MirroredDataset distribute_datasets_from_function(MirroredDataset::Function fn);

  /// Runs one step on this replica. The step's collectives go through the context; when
  /// one fails in elastic mode the ring is re-formed and the outcome is `redo`. Elastic:
  /// with `admit` off (every replica passes the same) a process waiting to join is not
  /// taken in after this step but at a later one (fit() keeps joiners out of the steps
  /// after which the replicas run collectives of their own: batch-level points, epoch ends).
  core::Expected<StepOutcome> run(const std::function<core::Status(ReplicaContext&)>& step,
                                  bool admit = true);
  /// Runs collectives between steps (an evaluation, agreeing on a decision): as run(),
  /// but no step is counted and nobody is taken in. Elastic: `redo` after a loss, with the
  /// new membership (the caller computes its inputs again). `what` names it in tags and
  /// stall reports.
  core::Expected<StepOutcome> run_collective(
      const std::string& what, const std::function<core::Status(ReplicaContext&)>& fn);
  /// The sum or mean of one value over the replicas (a metric).
  core::Expected<double> reduce(ReduceOp op, double value);

  /// Where this worker writes checkpoints: `base` on the chief; elsewhere a temporary
  /// directory under it (TensorFlow's tutorial), to be removed after saving.
  std::string checkpoint_dir(const std::string& base) const;
  /// Removes this worker's temporary checkpoint directory (not on the chief).
  core::Status remove_temporary_checkpoint_dir(const std::string& base) const;

  struct Impl;

 private:
  friend class ReplicaContext;
  explicit MultiWorkerMirroredStrategy(std::unique_ptr<Impl> impl);
  core::Status reform(bool after_failure, bool admit);
  /// Runs fn; elastic: re-forms after a failed collective (redo), taking in waiting
  /// processes if `admit`.
  core::Expected<StepOutcome> attempt(ReplicaContext& ctx,
                                      const std::function<core::Status(ReplicaContext&)>& fn,
                                      bool admit);
  /// Broadcasts the mirrored buffers from `root` (tagged with the generation).
  core::Status broadcast_state(int root);
  std::unique_ptr<Impl> impl_;
  int64_t step_ = 0;
  MirroredStats stats_;
};

}  // namespace troupe
