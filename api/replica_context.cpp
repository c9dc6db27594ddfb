// A step's view of the replicas: its collectives through the strategy's engine (at once
// on the step's thread, or as buckets on the engine's thread while the backward pass goes
// on), and each worker's shard of the input.
#include <utility>

#include "api/mirrored_impl.hpp"
#include "core/backend.hpp"
#include "core/data/guard.hpp"
#include "troupe/mirrored_strategy.hpp"

namespace troupe {

int ReplicaContext::replica_id_in_sync_group() const {
  return s_.worker_index();
}

int ReplicaContext::num_replicas_in_sync() const {
  return s_.num_replicas_in_sync();
}

size_t ReplicaContext::bytes_per_pack() const {
  return s_.impl_->options.bytes_per_pack;
}

collective::AllReduceOptions ReplicaContext::options(ReduceOp op,
                                                     std::vector<collective::Buffer> buffers,
                                                     core::DType wire) {
  collective::AllReduceOptions o;
  o.inputs = std::move(buffers);
  o.wire = wire;
  o.reduction = op == ReduceOp::mean ? collective::Reduction::mean : collective::Reduction::sum;
  o.tag = what_ + " " + std::to_string(s_.step()) + "/" + std::to_string(collectives_++);
  o.memory = collective::memory_of(o.inputs);
  if (o.memory == collective::Memory::device) {
    // On the step's thread, where the buffers became final: the point in the device's
    // stream an implementation with a stream of its own (NCCL) waits for.
    if (auto backend = core::backend_for(o.inputs.front().device)) {
      o.stream = (*backend)->native_stream();
      o.ready = (*backend)->record_event();
    }
  }
  return o;
}

core::Status ReplicaContext::all_reduce(ReduceOp op, const std::vector<collective::Buffer>& buffers,
                                        core::DType wire) {
  auto o = options(op, buffers, wire);
  auto& group = *s_.impl_->group;
  auto st = s_.impl_->engine.call(o.tag, [&] { return collective::all_reduce(group, o); });
  if (!st) collective_failed_ = true;
  return st;
}

collective::Engine::Ticket ReplicaContext::submit_all_reduce(
    ReduceOp op, std::vector<collective::Buffer> buffers, core::DType wire) {
  auto o = options(op, std::move(buffers), wire);
  // Buckets are only queued on the device (no host wait each); the step's last reduction,
  // on its own thread, waits and so reports a stalled peer.
  o.wait = false;
  auto* group = s_.impl_->group.get();
  // A failure here is seen by the strategy when it drains the engine after the step.
  std::string tag = o.tag;
  return s_.impl_->engine.submit(
      std::move(tag), [group, o = std::move(o)] { return collective::all_reduce(*group, o); });
}

BucketedAllReduce::BucketedAllReduce(ReplicaContext& ctx, ReduceOp op,
                                     std::vector<collective::Buffer> buffers, core::DType wire)
    : ctx_(ctx),
      op_(op),
      wire_(wire),
      buffers_(std::move(buffers)),
      sent_(buffers_.size(), false) {}

void BucketedAllReduce::ready(size_t i) {
  if (i >= buffers_.size() || sent_[i]) {
    if (misuse_.empty())
      misuse_ = "gradient " + std::to_string(i) + " of " + std::to_string(buffers_.size()) +
                (i >= buffers_.size() ? " does not exist" : " was marked ready twice");
    return;
  }
  sent_[i] = true;
  pending_.push_back(buffers_[i]);
  pending_bytes_ += buffers_[i].count * sizeof(float);
  if (pending_bytes_ >= ctx_.bytes_per_pack()) {
    tickets_.push_back(ctx_.submit_all_reduce(op_, std::move(pending_), wire_));
    pending_.clear();
    pending_bytes_ = 0;
  }
}

core::Status BucketedAllReduce::finish() {
  // Every gradient not sent yet, in the order marked and then the unmarked ones (last
  // first, as a backward pass would have marked them): the same on every replica.
  for (size_t i = buffers_.size(); i-- > 0;)
    if (!sent_[i]) {
      sent_[i] = true;
      pending_.push_back(buffers_[i]);
    }
  // Device buckets were only queued (no host wait each): the last reduction waits, so it
  // reports a peer that never came; with nothing left, an empty one does that waiting.
  if (pending_.empty() && !tickets_.empty() && !buffers_.empty() &&
      !buffers_.front().device.is_cpu())
    pending_.push_back({buffers_.front().data, 0, buffers_.front().device});
  core::Status last;
  if (!pending_.empty()) last = ctx_.all_reduce(op_, pending_, wire_);  // after the buckets
  pending_.clear();
  pending_bytes_ = 0;
  // The first failure in the order they ran: the buckets' before the last one's (which,
  // after a failed bucket, only says that it did not run).
  core::Status first;
  for (auto& t : tickets_)
    if (auto st = t.wait(); !st && first.ok()) first = st;
  tickets_.clear();
  if (!first.ok()) return first;
  if (!last.ok()) return last;
  if (!misuse_.empty()) return core::make_error(core::Errc::invalid_argument, misuse_);
  return {};
}

core::Expected<std::optional<core::Batch>> MirroredDataset::next() {
  std::optional<core::Batch> b;
  auto st = core::guard_user_data("the dataset function", [&] {
    if (generation_ != s_->generation() || !it_) {
      it_.reset();
      it_ = fn_(s_->input_context()).make_iterator();
      generation_ = s_->generation();
    }
    b = it_->next();
  });
  if (!st) return st.error();
  return b;
}

}  // namespace troupe
