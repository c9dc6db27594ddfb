// fit() as one replica of a MultiWorkerMirroredStrategy (see fit_runner.hpp).

#include <cmath>

#include "api/fit_runner.hpp"

namespace troupe::fit_detail {

using core::Errc;
using core::make_error;

namespace {

/// An error on one replica, told to the others at the next collective point: each replica
/// sets its own flag among `flags` (one per replica) before they are all-reduced.
core::Status failed_elsewhere(const std::vector<float>& flags, float scale,
                              const std::string& where) {
  std::string who;
  for (size_t i = 0; i < flags.size(); ++i)
    if (flags[i] * scale > 0.5f) who += (who.empty() ? "" : ",") + std::to_string(i);
  if (who.empty()) return {};
  return make_error(Errc::cancelled, "fit: stopped because worker index [" + who + "] failed " +
                                         where + " (its own log has its error)");
}

collective::Buffer buffer_of(core::Tensor& t) {
  return {t.data(), static_cast<size_t>(t.size()), t.device()};
}

/// One replica of a MultiWorkerMirroredStrategy: every worker runs the same steps on its
/// shard; the gradients and the step's metrics are all-reduced every step.
class MirroredRunner final : public Runner {
 public:
  MirroredRunner(Model& model, MultiWorkerMirroredStrategy& strategy, const DatasetCreator& data)
      : model_(model), strategy_(strategy), data_(data) {}
  // The strategy must not re-form into these buffers once fit() has returned.
  ~MirroredRunner() override { (void)strategy_.mirror({}); }

  core::Status start(FitState& s, int64_t batch_interval) override {
    auto& st = model_.state();
    if (!st.optimizer) return st.optimizer_error;
    if (auto ok = check_dataset(data_); !ok) return ok;
    if (auto& g = st.replica.graph) {
      // A Keras model: every replica holds its tables whole (mirrored), their gradients
      // made dense to be all-reduced.
      if (!st.spec.keras_options.dynamic_tables.empty())
        return make_error(Errc::invalid_argument,
                          "fit: a dynamic table lives on PS tasks, not mirrored");
      st.hold_table();
      // Every replica sends buffers of the same sizes, also one whose first batch failed.
      for (size_t w = 0; w < st.replica.params.size(); ++w)
        if (g->trains[w] && !g->table[w] &&
            st.replica.params[w].grad->shape() != st.replica.params[w].value->shape())
          *st.replica.params[w].grad =
              core::Tensor(st.replica.params[w].value->shape(), core::DType::float32,
                           st.replica.params[w].value->device());
      dense_table_grads_.assign(st.replica.params.size(), core::Tensor());
      for (size_t w = 0; w < st.replica.params.size(); ++w)
        if (g->table[w] && g->trains[w])
          dense_table_grads_[w] = core::Tensor(st.replica.params[w].value->shape());
      g->objective->reset_states();
      metric_layout_ = g->objective->states();
    }
    batch_interval_ = batch_interval;
    // Mirrored: the layers, the optimizer's slots, and the counters that say where
    // training stands (as int64 bit patterns, which the broadcast copies unchanged).
    counters_.assign(first_iteration + st.slots.size(), 0);
    counters_[offset_at] = s.initial_step - strategy_.step();
    counters_[epoch_at] = s.initial_epoch;
    counters_[interval_at] = batch_interval;
    save_iterations();
    std::vector<collective::Buffer> state;
    for (size_t i = 0; i < st.replica.params.size(); ++i) {
      state.push_back(buffer_of(*st.replica.params[i].value));
      for (auto& t : st.slots[i].slots)
        state.push_back(buffer_of(t));
    }
    state.push_back({reinterpret_cast<float*>(counters_.data()),
                     counters_.size() * sizeof(int64_t) / sizeof(float)});
    if (auto ok = strategy_.mirror(std::move(state)); !ok) return ok;
    load_iterations();
    if (counters_[interval_at] != batch_interval)
      return make_error(Errc::invalid_argument,
                        "fit: this worker's callbacks want batch-level calls every " +
                            std::to_string(batch_interval) + " steps, the chief's every " +
                            std::to_string(counters_[interval_at]) +
                            " (every worker must pass the same callbacks)");
    // Where the chief (or, for a process joining a running job, the others) stands.
    s.initial_step = global_step();
    s.initial_epoch = counters_[epoch_at];
    return {};
  }

  core::Status begin_epoch(FitState& s) override {
    counters_[epoch_at] = s.epoch;
    epoch_first_ = s.steps_per_epoch > 0 ? s.epoch * s.steps_per_epoch : s.step;
    rebuild(s.step);
    return {};
  }

  core::Expected<int64_t> run(
      FitState& s, int64_t n, BatchStats& train,
      const std::function<void(int64_t, const BatchStats&)>& done) override {
    auto& st = model_.state();
    const int64_t target = s.step + n;
    while (global_step() < target) {
      // A re-formed ring shards the data anew: the epoch's shard for the new membership,
      // past the steps done.
      if (strategy_.generation() != generation_) rebuild(global_step());
      const int64_t next = global_step() + 1;
      // A process joining after a step where the others then run collectives of their own
      // (the callbacks' agreement, the epoch's end) would not meet them: not there.
      const bool admit = !(batch_interval_ > 0 && next % batch_interval_ == 0) &&
                         !(s.steps_per_epoch > 0 && next == epoch_first_ + s.steps_per_epoch);
      bool ended = false;
      core::Status local;
      BatchStats stats;
      auto outcome = strategy_.run(
          [&](ReplicaContext& ctx) -> core::Status {
            const auto replicas = static_cast<size_t>(ctx.num_replicas_in_sync());
            // loss_sum, examples, ended, then a failure flag per replica.
            extra_.assign(3 + replicas, 0.0f);
            core::Expected<std::optional<core::Batch>> batch =
                it_ ? epochs_.next(*it_)
                    : core::Expected<std::optional<core::Batch>>(data_error_.error());
            // The gradients (on the host in float32, the metrics too: one collective) are
            // reduced in buckets as the backward pass makes them final, late layers first,
            // while the earlier layers compute.
            const auto wire = strategy_.gradient_wire();
            const collective::Buffer metrics{extra_.data(), extra_.size()};
            const bool metrics_along = st.replica.device.is_cpu() && wire == core::DType::float32;
            std::vector<collective::Buffer> buffers = step_buffers();
            if (metrics_along) buffers.push_back(metrics);
            BucketedAllReduce reduce(ctx, ReduceOp::mean, std::move(buffers), wire);
            marked_.assign(st.replica.params.size(), false);
            auto mark = [&](size_t i) {
              if (st.replica.graph && st.replica.graph->table[i]) return;  // made dense below
              marked_[i] = true;
              reduce.ready(i);
            };
            core::Expected<BatchStats> mine = BatchStats{};
            if (!batch)
              mine = batch.error();
            else if (*batch)
              mine = detail::run_batch(st.replica, **batch, /*backward=*/true, mark);
            const bool stepped = batch && *batch && mine;
            if (!stepped) {
              // Nothing to add: zero gradients, and the others learn why. (Gradients already
              // marked are on their way, a non-finite loss's among them: this replica's
              // failure flag fails the step on every replica, and nothing of it is applied.)
              for (size_t i = 0; i < st.replica.params.size(); ++i) {
                auto& p = st.replica.params[i];
                if (!marked_[i] && p.grad->shape() == p.value->shape())  // a table's: none
                  p.grad->fill(0.0f);
              }
              if (batch && !*batch) extra_[2] = 1.0f;
              if (!mine) {
                local = mine.error();
                extra_[3 + static_cast<size_t>(ctx.replica_id_in_sync_group())] = 1.0f;
              }
            } else {
              extra_[0] = static_cast<float>(mine->loss_sum);
              extra_[1] = static_cast<float>(mine->examples);
            }
            if (st.replica.graph) fill_dense_tables(stepped);
            // Every replica marks the same gradients in the same order: one that did not
            // step (or whose model reports none) marks them here.
            for (size_t i : st.replica.graph->graph().gradient_order())
              if (!marked_[i]) mark(i);
            if (auto ok = reduce.finish(); !ok) return ok;
            if (!metrics_along)
              // Two collectives: the gradients on the device and the metrics on the host,
              // or the gradients in bfloat16 and the counts exact.
              if (auto ok = ctx.all_reduce(ReduceOp::mean, {metrics}); !ok) return ok;
            const auto scale = static_cast<float>(replicas);
            if (!local) return local;
            if (auto ok = failed_elsewhere({extra_.begin() + 3, extra_.end()}, scale,
                                           "in step " + std::to_string(next));
                !ok)
              return ok;
            if (extra_[2] * scale > 0.5f) {
              ended = true;  // some replica's shard ended: the epoch ends for everyone
              return make_error(Errc::out_of_range, "the data ended");
            }
            stats.loss_sum = static_cast<double>(extra_[0]) * replicas;
            stats.examples = std::llround(static_cast<double>(extra_[1]) * replicas);
            stats.batches = 1;
            if (st.replica.graph) {
              // The compiled metrics' states, summed over the replicas.
              if (auto ok =
                      sum_metrics(ctx, mine.ok() ? mine->metrics : metric_layout_, stats.metrics);
                  !ok)
                return ok;
            }
            if (auto ok = apply_gradients(st, /*dense_tables=*/true, &dense_table_grads_); !ok)
              return ok;
            save_iterations();
            return {};
          },
          admit);
      load_iterations();  // after a re-forming: the root's
      if (!outcome) {
        if (ended) break;
        return outcome.error();
      }
      if (*outcome == StepOutcome::redo) continue;
      train.merge(stats);
      done(1, stats);
    }
    return global_step() - s.step;
  }

  core::Expected<BatchStats> validate(FitState& s) override {
    if (s.options->validation == FitOptions::Validation::direct) return model_.evaluate();
    // Distributed: each replica evaluates every num_replicas-th batch; the sums and the
    // metrics' states are all-reduced, so every replica logs the same figures.
    auto& st = model_.state();
    if (!st.replica.graph)
      return make_error(Errc::invalid_argument,
                        "distributed validation under MultiWorkerMirroredStrategy needs a Keras "
                        "model: model '" +
                            model_.spec().name + "' is not one");
    auto batches = st.eval.get_batches(st.spec);
    if (!batches) return batches.error();
    const auto n = static_cast<int64_t>((*batches)->size());
    BatchStats total;
    core::Status local;
    auto done = collective("validation", [&](ReplicaContext& ctx) -> core::Status {
      const auto replicas = ctx.num_replicas_in_sync();
      const auto me = ctx.replica_id_in_sync_group();
      BatchStats mine;
      for (int64_t i = me; i < n && local.ok(); i += replicas) {
        auto stats = st.replica.graph->run((**batches)[static_cast<size_t>(i)], /*train=*/false,
                                           detail::model_rows(st));
        if (stats)
          mine.merge(*stats);
        else
          local = stats.error();
      }
      std::vector<float> sums(2 + static_cast<size_t>(replicas), 0.0f);
      sums[0] = static_cast<float>(mine.loss_sum);
      sums[1] = static_cast<float>(mine.examples);
      if (!local) sums[2 + static_cast<size_t>(me)] = 1.0f;
      if (auto ok = ctx.all_reduce(ReduceOp::sum, {{sums.data(), sums.size()}}); !ok) return ok;
      core::graph::MetricStates metrics;
      if (auto ok = sum_metrics(ctx, mine.metrics.values.empty() ? metric_layout_ : mine.metrics,
                                metrics);
          !ok)
        return ok;
      if (!local) return local;
      if (auto ok = failed_elsewhere({sums.begin() + 2, sums.end()}, 1.0f, "in validation"); !ok)
        return ok;
      total = BatchStats{sums[0], std::llround(sums[1]), n};
      total.metrics = std::move(metrics);
      return {};
    });
    if (!done) return done.error();
    return total;
  }

  core::Status agree(FitState& s, core::Status local) override {
    std::vector<float> flags;
    auto done = collective("agreement", [&](ReplicaContext& ctx) -> core::Status {
      // stop_training, then a failure flag per replica.
      flags.assign(1 + static_cast<size_t>(ctx.num_replicas_in_sync()), 0.0f);
      flags[0] = s.stop_training ? 1.0f : 0.0f;
      if (!local) flags[1 + static_cast<size_t>(ctx.replica_id_in_sync_group())] = 1.0f;
      return ctx.all_reduce(ReduceOp::sum, {{flags.data(), flags.size()}});
    });
    if (!local) return local;
    if (!done) return done;
    if (auto ok = failed_elsewhere({flags.begin() + 1, flags.end()}, 1.0f,
                                   "in its callbacks at step " + std::to_string(s.step));
        !ok)
      return ok;
    if (flags[0] > 0.5f) s.stop_training = true;
    return {};
  }

  void finish(History& h) override { h.mirrored = strategy_.stats(); }

 private:
  // The buffers to all-reduce (mean), one per parameter: its gradient; for a Keras model a
  // table's made dense (fill_dense_tables), and the values of the non-trainable weights (a
  // BatchNormalization's moving statistics, averaged across the workers as TensorFlow's
  // mirrored variables are).
  std::vector<collective::Buffer> step_buffers() {
    auto& st = model_.state();
    std::vector<collective::Buffer> buffers;
    for (size_t w = 0; w < st.replica.params.size(); ++w) {
      auto& p = st.replica.params[w];
      if (!st.replica.graph)
        buffers.push_back(buffer_of(*p.grad));
      else if (!st.replica.graph->trains[w])
        buffers.push_back(buffer_of(*p.value));
      else if (st.replica.graph->table[w])
        buffers.push_back(buffer_of(dense_table_grads_[w]));
      else
        buffers.push_back(buffer_of(*p.grad));
    }
    return buffers;
  }

  // Each trained table's gradient made dense: zeros but for the rows its batch used.
  void fill_dense_tables(bool stepped) {
    auto& g = *model_.state().replica.graph;
    for (size_t w = 0; w < dense_table_grads_.size(); ++w) {
      if (!g.table[w] || !g.trains[w]) continue;
      auto& dense = dense_table_grads_[w];
      dense.fill(0.0f);
      if (!stepped) continue;
      const auto& use = g.tables()[static_cast<size_t>(g.table_of(w))];
      const core::ConstTensorView rows = g.host_gradient(w);
      const int64_t width = dense.shape()[1];
      for (size_t r = 0; r < use.ids.size(); ++r)
        std::copy_n(rows.data() + static_cast<int64_t>(r) * width, width,
                    dense.data() + use.ids[r] * width);
    }
  }

  // Sums every replica's metric states into `out` (their layout is the objective's).
  core::Status sum_metrics(ReplicaContext& ctx, const core::graph::MetricStates& mine,
                           core::graph::MetricStates& out) {
    std::vector<float> flat;
    for (const auto& m : mine.values) {
      flat.push_back(static_cast<float>(m.total));
      flat.push_back(static_cast<float>(m.count));
      flat.insert(flat.end(), m.positives.begin(), m.positives.end());
      flat.insert(flat.end(), m.negatives.begin(), m.negatives.end());
    }
    if (auto ok = ctx.all_reduce(ReduceOp::sum, {{flat.data(), flat.size()}}); !ok) return ok;
    out = metric_layout_;
    size_t at = 0;
    for (auto& m : out.values) {
      m.total = flat[at++];
      m.count = std::llround(flat[at++]);
      for (auto& c : m.positives)
        c = std::llround(flat[at++]);
      for (auto& c : m.negatives)
        c = std::llround(flat[at++]);
    }
    return {};
  }

  static constexpr size_t offset_at = 0;  // global step - the strategy's step
  static constexpr size_t epoch_at = 1;
  static constexpr size_t interval_at = 2;      // the chief's batch-level interval
  static constexpr size_t first_iteration = 3;  // then each parameter's optimizer iterations

  int64_t global_step() const { return counters_[offset_at] + strategy_.step(); }

  void save_iterations() {
    auto& slots = model_.state().slots;
    for (size_t i = 0; i < slots.size(); ++i)
      counters_[first_iteration + i] = slots[i].iterations;
  }
  void load_iterations() {
    auto& slots = model_.state().slots;
    for (size_t i = 0; i < slots.size(); ++i)
      slots[i].iterations = counters_[first_iteration + i];
  }

  // A dataset that cannot be built is not an error here: the next step carries it to every
  // replica (each must still meet the others' collectives), which then all end naming it.
  void rebuild(int64_t step) {
    auto it = epochs_.iterate(strategy_.input_context(), step - epoch_first_);
    it_.reset();
    data_error_ = {};
    if (it)
      it_ = std::move(*it);
    else
      data_error_ = it.error();
    generation_ = strategy_.generation();
  }

  /// Runs collectives between steps until they are done (elastic: again after a loss,
  /// with the new membership).
  core::Status collective(const std::string& what,
                          const std::function<core::Status(ReplicaContext&)>& fn) {
    for (;;) {
      auto outcome = strategy_.run_collective(what, fn);
      load_iterations();
      if (!outcome) return outcome.error();
      if (*outcome == StepOutcome::done) return {};
    }
  }

  Model& model_;
  MultiWorkerMirroredStrategy& strategy_;
  const DatasetCreator& data_;
  EpochData epochs_{data_};
  int64_t batch_interval_ = 0;
  std::vector<int64_t> counters_;
  std::vector<float> extra_;
  std::vector<core::Tensor> dense_table_grads_;  // a Keras model's, per weight
  std::vector<bool> marked_;                     // per parameter: this step's, on its way
  core::graph::MetricStates metric_layout_;      // its metric states, zero
  int64_t epoch_first_ = 0;
  uint64_t generation_ = 0;
  std::unique_ptr<core::Iterator<core::Batch>> it_;
  core::Status data_error_;  // why it_ is null
};

}  // namespace

std::unique_ptr<Runner> make_mirrored_runner(Model& model, MultiWorkerMirroredStrategy& strategy,
                                             const DatasetCreator& data) {
  return std::make_unique<MirroredRunner>(model, strategy, data);
}

}  // namespace troupe::fit_detail
