#include "troupe/fit.hpp"

#include <algorithm>
#include <chrono>

#include "api/fit_runner.hpp"
#include "troupe/coordinator.hpp"
#include "troupe/strategy.hpp"

namespace troupe {

using core::Errc;
using core::make_error;
using clock_type = std::chrono::steady_clock;
using fit_detail::apply_gradients;
using fit_detail::check_dataset;
using fit_detail::EpochData;
using fit_detail::Runner;

namespace {

double seconds_since(clock_type::time_point t) {
  return std::chrono::duration<double>(clock_type::now() - t).count();
}

// What Keras's logs hold for these stats: the model's compiled names, with `prefix` ("val_").
Logs stats_logs(Model& model, const BatchStats& stats, const std::string& prefix = "") {
  return detail::graph_logs(*model.state().replica.graph, stats, prefix);
}

class LocalRunner final : public Runner {
 public:
  LocalRunner(Model& model, const DatasetCreator& data) : model_(model), data_(data) {}

  core::Status start(FitState&, int64_t) override {
    auto& st = model_.state();
    if (!st.optimizer) return st.optimizer_error;
    if (!st.spec.keras_options.dynamic_tables.empty())
      return make_error(Errc::invalid_argument,
                        "fit: a Keras model with dynamic tables trains on PS tasks (pass a "
                        "ParameterServerStrategy)");
    st.hold_table();  // trained here: the table and its slots in this process
    return check_dataset(data_);
  }

  core::Status begin_epoch(FitState& s) override {
    // Each epoch is a fresh iterator over the data (a dataset that repeats never ends; then
    // steps_per_epoch bounds the epoch). Resuming mid-epoch skips the batches done.
    auto it = epochs_.iterate(core::InputContext{},
                              s.steps_per_epoch > 0 ? s.step - s.epoch * s.steps_per_epoch : 0);
    if (!it) return it.error();
    it_ = std::move(*it);
    return {};
  }

  core::Expected<int64_t> run(
      FitState&, int64_t n, BatchStats& train,
      const std::function<void(int64_t, const BatchStats&)>& done) override {
    auto& st = model_.state();
    int64_t ran = 0;
    for (; ran < n; ++ran) {
      auto batch = epochs_.next(*it_);
      if (!batch) return batch.error();
      if (!*batch) break;
      auto stats = detail::run_batch(st.replica, **batch, /*backward=*/true);
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
    auto ds = coord_->create_per_worker_dataset(data_.name, data_.args);
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
      scaled.scale(p.steps);
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
  // The model on the spec's device (a worker's GPU by its local rank), its slots with it.
  if (auto st = model.state().place(); !st) return st.error();

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
    double epoch_loss_sum = 0.0;  // as loss_sum: mean batch loss times batch size, summed
    auto progress = [&](int64_t steps, const BatchStats& last) {
      epoch_step += steps;
      epoch_examples += last.examples * steps;
      epoch_loss_sum += last.loss_sum * static_cast<double>(steps);
      Progress p;
      p.step = epoch_first + epoch_step;
      p.epoch_step = epoch_step;
      p.examples = examples_total + epoch_examples;
      p.loss = last.loss();
      p.epoch_loss =
          epoch_examples > 0 ? epoch_loss_sum / static_cast<double>(epoch_examples) : p.loss;
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
        const bool read = std::any_of(callbacks.begin(), callbacks.end(), [&](const auto& c) {
          return wants_call(c) && c->reads_batch_logs();
        });
        // As Keras's: the epoch's metrics so far, not the last stretch's alone.
        const Logs batch_logs = read ? stats_logs(model, train) : Logs{};
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
    logs = stats_logs(model, train);
    logs["examples_per_sec"] = epoch_s > 0 ? static_cast<double>(epoch_examples) / epoch_s : 0.0;
    logs["epoch_s"] = epoch_s;
    const bool last = s.epoch + 1 == options.epochs;
    if (options.validation != FitOptions::Validation::none &&
        (last || (s.epoch + 1) % options.validation_freq == 0)) {
      auto val = runner->validate(s);
      if (!val) return val.error();
      for (const auto& [k, v] : stats_logs(model, *val, "val_"))
        logs[k] = v;
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
        return fit_detail::make_mirrored_runner(model, strategy, data);
      },
      FitStrategy::mirrored, strategy.is_chief(), data.name, options, callbacks);
}

}  // namespace troupe
