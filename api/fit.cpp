#include "troupe/fit.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <optional>

#include "api/model_state.hpp"
#include "troupe/coordinator.hpp"
#include "troupe/registry.hpp"
#include "troupe/strategy.hpp"

namespace troupe {

using core::Errc;
using core::make_error;
using clock_type = std::chrono::steady_clock;

namespace {

double seconds_since(clock_type::time_point t) {
  return std::chrono::duration<double>(clock_type::now() - t).count();
}

/// How one epoch's steps are run: in this process, or as closures on the workers.
class Runner {
 public:
  virtual ~Runner() = default;
  /// Before the first epoch (after on_train_begin); `batch_interval` is where batch-level
  /// callbacks run (0: nowhere).
  virtual core::Status start(FitState& s, int64_t batch_interval) = 0;
  virtual core::Status begin_epoch(FitState& s) = 0;
  /// Runs up to `n` steps, adding their stats to `train` and reporting each finished one
  /// to `done(steps, stats)`. Returns the steps run: fewer than n only when the data ended
  /// (one process).
  virtual core::Expected<int64_t> run(
      FitState& s, int64_t n, BatchStats& train,
      const std::function<void(int64_t, const BatchStats&)>& done) = 0;
  virtual core::Expected<BatchStats> validate(FitState& s) = 0;
  /// After the callbacks of a batch-level point or an epoch end, with how they went here:
  /// what every process goes on with (mirrored: an error on any replica, and a stop asked
  /// for by any, hold for all).
  virtual core::Status agree(FitState&, core::Status local) { return local; }
  virtual void finish(History&) {}
};

core::Status check_dataset(const DatasetCreator& data) {
  if (data.registry == nullptr || data.registry->dataset(data.name) == nullptr)
    return make_error(Errc::not_found, "no dataset '" + data.name + "' registered");
  return {};
}

/// The training data of one fit(): the dataset function called once per input context
/// (files are read once, not every epoch), a fresh iterator each epoch (a reshuffling
/// dataset draws a new order), past the batches already done when resuming mid-epoch.
class EpochData {
 public:
  explicit EpochData(const DatasetCreator& data) : data_(data) {}

  std::unique_ptr<core::Iterator<core::Batch>> iterate(const core::InputContext& ctx,
                                                       int64_t skip) {
    if (!dataset_ || ctx.input_pipeline_id != ctx_.input_pipeline_id ||
        ctx.num_input_pipelines != ctx_.num_input_pipelines ||
        ctx.num_replicas_in_sync != ctx_.num_replicas_in_sync) {
      dataset_.emplace((*data_.registry->dataset(data_.name))(ctx));
      ctx_ = ctx;
    }
    auto it = dataset_->make_iterator();
    for (int64_t i = 0; i < skip; ++i)
      if (!it->next()) break;
    return it;
  }

 private:
  const DatasetCreator& data_;
  core::InputContext ctx_;
  std::optional<core::Dataset<core::Batch>> dataset_;
};

/// The optimizer's update of every parameter from its gradient.
core::Status apply_gradients(Model::State& st) {
  for (size_t i = 0; i < st.replica.params.size(); ++i) {
    auto& p = st.replica.params[i];
    if (auto ok = st.optimizer->apply_dense(*p.value, *p.grad, st.slots[i]); !ok) return ok;
  }
  return {};
}

class LocalRunner final : public Runner {
 public:
  LocalRunner(Model& model, const DatasetCreator& data) : model_(model), data_(data) {}

  core::Status start(FitState&, int64_t) override {
    auto& st = model_.state();
    if (!st.optimizer) return st.optimizer_error;
    return check_dataset(data_);
  }

  core::Status begin_epoch(FitState& s) override {
    // Each epoch is a fresh iterator over the data (a dataset that repeats never ends; then
    // steps_per_epoch bounds the epoch). Resuming mid-epoch skips the batches done.
    it_ = epochs_.iterate(core::InputContext{},
                          s.steps_per_epoch > 0 ? s.step - s.epoch * s.steps_per_epoch : 0);
    return {};
  }

  core::Expected<int64_t> run(
      FitState&, int64_t n, BatchStats& train,
      const std::function<void(int64_t, const BatchStats&)>& done) override {
    auto& st = model_.state();
    int64_t ran = 0;
    for (; ran < n; ++ran) {
      auto batch = it_->next();
      if (!batch) break;
      auto stats = detail::run_batch(st.replica, *batch, /*backward=*/true);
      if (!stats) return stats.error();
      if (auto ok = apply_gradients(st); !ok) return ok.error();
      train.merge(*stats);
      done(1, *stats);
    }
    return ran;
  }

  core::Expected<BatchStats> validate(FitState& s) override {
    if (s.options->validation == FitOptions::Validation::distributed)
      return make_error(Errc::invalid_argument,
                        "distributed validation needs a ParameterServerStrategy");
    return model_.evaluate();
  }

 private:
  Model& model_;
  const DatasetCreator& data_;
  EpochData epochs_{data_};
  std::unique_ptr<core::Iterator<core::Batch>> it_;
};

class PsRunner final : public Runner {
 public:
  PsRunner(Model& model, const DatasetCreator& data, const CoordinatorOptions& copt)
      : model_(model), data_(data), copt_(copt) {}

  core::Status start(FitState&, int64_t) override {
    auto c = model_.coordinator(copt_);
    if (!c) return c.error();
    coord_ = *c;
    auto ds = coord_->create_per_worker_dataset(data_.name);
    if (!ds) return ds.error();
    ds_ = *ds;
    return {};
  }

  core::Status begin_epoch(FitState&) override { return {}; }

  core::Expected<int64_t> run(
      FitState& s, int64_t n, BatchStats& train,
      const std::function<void(int64_t, const BatchStats&)>& done) override {
    // Schedule every closure of the stretch at once (the coordinator queues them and keeps
    // each worker busy), then take their results in order as they arrive.
    const int64_t per = std::max(1, s.options->steps_per_execution);
    struct Pending {
      RemoteValue<BatchStats> value;
      int64_t steps;
    };
    std::vector<Pending> pending;
    const std::string step = model_.spec().name + "/train";
    for (int64_t left = n; left > 0; left -= per) {
      const auto k = static_cast<uint32_t>(std::min(per, left));
      pending.push_back({coord_->schedule_repeated<BatchStats>(step, k, ds_), k});
    }
    core::Status failed;
    for (auto& p : pending) {
      auto stats = p.value.fetch();
      if (!stats) {
        if (failed.ok()) failed = stats.error();
        continue;
      }
      // The closure returns its last step's stats: count them for the k steps it ran.
      BatchStats scaled = *stats;
      scaled.examples *= p.steps;
      scaled.correct *= p.steps;
      scaled.loss_sum *= static_cast<double>(p.steps);
      scaled.batches = p.steps;
      train.merge(scaled);
      done(p.steps, *stats);
    }
    const auto joined = coord_->join();
    if (!failed.ok()) return failed.error();
    if (!joined.ok()) return joined.error();
    return n;
  }

  core::Expected<BatchStats> validate(FitState& s) override {
    if (s.options->validation == FitOptions::Validation::distributed)
      return model_.evaluate_distributed();
    return model_.evaluate();
  }

  void finish(History& h) override { h.stats = coord_->stats(); }

 private:
  Model& model_;
  const DatasetCreator& data_;
  CoordinatorOptions copt_;
  ClusterCoordinator* coord_ = nullptr;
  PerWorkerDataset ds_;
};

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
  return {t.data(), static_cast<size_t>(t.size())};
}

/// One replica of a MultiWorkerMirroredStrategy: every worker runs the same steps on its
/// shard; the gradients and the step's metrics are all-reduced every step.
class MirroredRunner final : public Runner {
 public:
  MirroredRunner(Model& model, MultiWorkerMirroredStrategy& strategy, const DatasetCreator& data)
      : model_(model), strategy_(strategy), data_(data) {}

  core::Status start(FitState& s, int64_t batch_interval) override {
    auto& st = model_.state();
    if (!st.optimizer) return st.optimizer_error;
    if (auto ok = check_dataset(data_); !ok) return ok;
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
            // loss_sum, correct, examples, ended, then a failure flag per replica.
            extra_.assign(4 + replicas, 0.0f);
            auto batch = it_->next();
            core::Expected<BatchStats> mine = BatchStats{};
            if (batch) mine = detail::run_batch(st.replica, *batch, /*backward=*/true);
            if (!batch || !mine) {
              // Nothing to add: zero gradients, and the others learn why.
              for (auto& p : st.replica.params)
                p.grad->fill(0.0f);
              if (!batch) extra_[3] = 1.0f;
              if (!mine) {
                local = mine.error();
                extra_[4 + static_cast<size_t>(ctx.replica_id_in_sync_group())] = 1.0f;
              }
            } else {
              extra_[0] = static_cast<float>(mine->loss_sum);
              extra_[1] = static_cast<float>(mine->correct);
              extra_[2] = static_cast<float>(mine->examples);
            }
            std::vector<collective::Buffer> buffers;
            for (auto& p : st.replica.params)
              buffers.push_back(buffer_of(*p.grad));
            buffers.push_back({extra_.data(), extra_.size()});
            if (auto ok = ctx.all_reduce(ReduceOp::mean, buffers); !ok) return ok;
            const auto scale = static_cast<float>(replicas);
            if (!local) return local;
            if (auto ok = failed_elsewhere({extra_.begin() + 4, extra_.end()}, scale,
                                           "in step " + std::to_string(next));
                !ok)
              return ok;
            if (extra_[3] * scale > 0.5f) {
              ended = true;  // some replica's shard ended: the epoch ends for everyone
              return make_error(Errc::out_of_range, "the data ended");
            }
            stats.loss_sum = static_cast<double>(extra_[0]) * replicas;
            stats.correct = std::llround(static_cast<double>(extra_[1]) * replicas);
            stats.examples = std::llround(static_cast<double>(extra_[2]) * replicas);
            stats.batches = 1;
            if (auto ok = apply_gradients(st); !ok) return ok;
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
    // Distributed: each replica evaluates every num_replicas-th batch; the sums are
    // all-reduced, so every replica logs the same figures.
    auto examples = model_.eval_examples();
    if (!examples) return examples.error();
    const int64_t batches = model_.eval_batches();
    BatchStats total;
    core::Status local;
    auto done = collective("validation", [&](ReplicaContext& ctx) -> core::Status {
      const auto replicas = ctx.num_replicas_in_sync();
      const auto me = ctx.replica_id_in_sync_group();
      BatchStats mine;
      for (int64_t i = me; i < batches && local.ok(); i += replicas) {
        auto batch = eval_batch(**examples, model_.spec().eval_batch_size, i);
        auto stats = batch ? detail::run_batch(model_.state().replica, *batch, false)
                           : core::Expected<BatchStats>(batch.error());
        if (stats)
          mine.merge(*stats);
        else
          local = stats.error();
      }
      std::vector<float> sums(3 + static_cast<size_t>(replicas), 0.0f);
      sums[0] = static_cast<float>(mine.loss_sum);
      sums[1] = static_cast<float>(mine.correct);
      sums[2] = static_cast<float>(mine.examples);
      if (!local) sums[3 + static_cast<size_t>(me)] = 1.0f;
      if (auto ok = ctx.all_reduce(ReduceOp::sum, {{sums.data(), sums.size()}}); !ok) return ok;
      if (!local) return local;
      if (auto ok = failed_elsewhere({sums.begin() + 3, sums.end()}, 1.0f, "in validation"); !ok)
        return ok;
      total = BatchStats{sums[0], std::llround(sums[1]), std::llround(sums[2]), batches};
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

  void rebuild(int64_t step) {
    it_ = epochs_.iterate(strategy_.input_context(), step - epoch_first_);
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
  int64_t epoch_first_ = 0;
  uint64_t generation_ = 0;
  std::unique_ptr<core::Iterator<core::Batch>> it_;
};

template <class F>
core::Status each(const Callbacks& callbacks, F f) {
  for (const auto& c : callbacks)
    if (auto st = f(*c); !st) return st;
  return {};
}

using MakeRunner = std::function<std::unique_ptr<Runner>(const CoordinatorOptions&)>;

core::Expected<History> run_fit(Model& model, const MakeRunner& make_runner, FitStrategy kind,
                                bool is_chief, const std::string& dataset,
                                const FitOptions& options, const Callbacks& callbacks) {
  if (options.epochs < 1)
    return make_error(Errc::invalid_argument, "fit: epochs must be at least 1");
  if (options.steps_per_epoch < 0 || options.steps_per_execution < 1)
    return make_error(Errc::invalid_argument,
                      "fit: steps_per_epoch must be >= 0 and steps_per_execution >= 1");
  if (options.validation != FitOptions::Validation::none && options.validation_freq < 1)
    return make_error(Errc::invalid_argument, "fit: validation_freq must be at least 1");

  FitState s;
  s.model = &model;
  s.options = &options;
  s.strategy = kind;
  s.is_chief = is_chief;
  s.steps_per_epoch = options.steps_per_epoch;
  CoordinatorOptions copt = options.coordinator;
  const bool ps = kind == FitStrategy::parameter_server;
  if (ps && model.coordinator_if_made() == nullptr) s.coordinator_options = &copt;
  if (auto st = each(callbacks, [&](Callback& c) { return c.on_train_begin(s); }); !st)
    return st.error();
  s.coordinator_options = nullptr;

  // Batch-level callbacks: each at its own interval; with a PS strategy the stretch
  // between two such points is run (and finished) as one.
  int64_t sync = 0;
  for (const auto& c : callbacks)
    if (c->batch_interval() > 0)
      sync = sync == 0 ? c->batch_interval() : std::min(sync, c->batch_interval());
  auto runner = make_runner(copt);
  if (auto st = runner->start(s, sync); !st) return st.error();

  History h;
  h.initial_epoch = s.initial_epoch;
  h.initial_step = s.initial_step;
  s.epoch = s.initial_epoch;
  s.step = s.initial_step;
  Logs logs;
  const auto t_fit = clock_type::now();
  int64_t examples_total = 0;
  for (; s.epoch < options.epochs; ++s.epoch) {
    if (auto st = each(callbacks, [&](Callback& c) { return c.on_epoch_begin(s); }); !st)
      return st.error();
    if (auto st = runner->begin_epoch(s); !st) return st.error();
    const auto t_epoch = clock_type::now();
    const int64_t epoch_first = s.steps_per_epoch > 0 ? s.epoch * s.steps_per_epoch : s.step;
    int64_t epoch_step = s.step - epoch_first;
    int64_t epoch_examples = 0;
    BatchStats train;
    auto progress = [&](int64_t steps, const BatchStats& last) {
      epoch_step += steps;
      epoch_examples += last.examples * steps;
      Progress p;
      p.step = epoch_first + epoch_step;
      p.epoch_step = epoch_step;
      p.examples = examples_total + epoch_examples;
      p.loss = last.loss();
      p.elapsed_s = seconds_since(t_epoch);
      p.examples_per_sec = p.elapsed_s > 0 ? static_cast<double>(epoch_examples) / p.elapsed_s : 0;
      for (const auto& c : callbacks)
        c->on_progress(s, p);
    };
    bool data_ended = false;
    while (!data_ended && (s.steps_per_epoch == 0 || s.step < epoch_first + s.steps_per_epoch)) {
      // Up to the epoch's end or the next batch-level point, whichever is first.
      int64_t n = s.steps_per_epoch > 0 ? epoch_first + s.steps_per_epoch - s.step : 1 << 30;
      if (sync > 0) n = std::min(n, sync - s.step % sync);
      if (kind == FitStrategy::local && s.steps_per_epoch == 0 && sync == 0) n = 1;
      BatchStats stretch;
      auto ran = runner->run(s, n, stretch, progress);
      if (!ran) return ran.error();
      train.merge(stretch);
      s.step += *ran;
      h.steps_run += *ran;
      if (*ran < n) data_ended = true;
      auto wants_call = [&](const std::shared_ptr<Callback>& c) {
        return c->batch_interval() > 0 && s.step % c->batch_interval() == 0;
      };
      if (*ran > 0 && std::any_of(callbacks.begin(), callbacks.end(), wants_call)) {
        const Logs batch_logs{{"loss", stretch.loss()}, {"accuracy", stretch.accuracy()}};
        core::Status called;
        for (const auto& c : callbacks)
          if (wants_call(c) && called.ok()) called = c->on_train_batch_end(s, batch_logs);
        if (auto st = runner->agree(s, std::move(called)); !st) return st.error();
      }
    }
    if (s.steps_per_epoch > 0 && s.step < epoch_first + s.steps_per_epoch)
      return make_error(Errc::out_of_range, "fit: dataset '" + dataset + "' ended after " +
                                                std::to_string(s.step - epoch_first) + " of " +
                                                std::to_string(s.steps_per_epoch) +
                                                " steps of epoch " + std::to_string(s.epoch + 1) +
                                                " (repeat it, or lower steps_per_epoch)");
    if (s.steps_per_epoch == 0 && s.step == epoch_first)
      return make_error(Errc::out_of_range,
                        "fit: the dataset gave no batch in epoch " + std::to_string(s.epoch + 1));
    examples_total += epoch_examples;
    const double epoch_s = seconds_since(t_epoch);
    logs = {{"loss", train.loss()},
            {"accuracy", train.accuracy()},
            {"examples_per_sec", epoch_s > 0 ? static_cast<double>(epoch_examples) / epoch_s : 0.0},
            {"epoch_s", epoch_s}};
    const bool last = s.epoch + 1 == options.epochs;
    if (options.validation != FitOptions::Validation::none &&
        (last || (s.epoch + 1) % options.validation_freq == 0)) {
      auto val = runner->validate(s);
      if (!val) return val.error();
      logs["val_loss"] = val->loss();
      logs["val_accuracy"] = val->accuracy();
    }
    if (auto st =
            runner->agree(s, each(callbacks, [&](Callback& c) { return c.on_epoch_end(s, logs); }));
        !st)
      return st.error();
    h.epochs.push_back(logs);
    if (s.stop_training) {
      h.stopped_early = !last;
      break;
    }
  }
  // on_train_end sees the last epoch that ran (or the last one, when resumed at the end).
  s.epoch = std::min(s.epoch, options.epochs - 1);
  h.train_s = seconds_since(t_fit);
  h.steps = s.step;
  if (auto st = each(callbacks, [&](Callback& c) { return c.on_train_end(s, logs); }); !st)
    return st.error();
  runner->finish(h);
  return h;
}

}  // namespace

core::Expected<History> fit(Model& model, const DatasetCreator& data, const FitOptions& options,
                            const Callbacks& callbacks) {
  if (model.strategy() != nullptr)
    return make_error(Errc::invalid_argument, "fit: model '" + model.spec().name +
                                                  "' is attached to a ParameterServerStrategy; "
                                                  "pass the strategy");
  return run_fit(
      model, [&](const CoordinatorOptions&) { return std::make_unique<LocalRunner>(model, data); },
      FitStrategy::local, true, data.name, options, callbacks);
}

core::Expected<History> fit(Model& model, ParameterServerStrategy& strategy,
                            const DatasetCreator& data, const FitOptions& options,
                            const Callbacks& callbacks) {
  if (options.steps_per_epoch <= 0)
    return make_error(Errc::invalid_argument,
                      "fit: steps_per_epoch is required with a ParameterServerStrategy (its "
                      "per-worker datasets repeat; an epoch is a number of steps)");
  if (auto st = model.attach(strategy); !st) return st.error();
  return run_fit(
      model,
      [&](const CoordinatorOptions& copt) { return std::make_unique<PsRunner>(model, data, copt); },
      FitStrategy::parameter_server, true, data.name, options, callbacks);
}

core::Expected<History> fit(Model& model, MultiWorkerMirroredStrategy& strategy,
                            const DatasetCreator& data, const FitOptions& options,
                            const Callbacks& callbacks) {
  if (model.strategy() != nullptr)
    return make_error(Errc::invalid_argument, "fit: model '" + model.spec().name +
                                                  "' is attached to a ParameterServerStrategy");
  return run_fit(
      model,
      [&](const CoordinatorOptions&) {
        return std::make_unique<MirroredRunner>(model, strategy, data);
      },
      FitStrategy::mirrored, strategy.is_chief(), data.name, options, callbacks);
}

}  // namespace troupe
