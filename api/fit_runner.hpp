#pragma once

// What fit() is built from (not public): a Runner says where one epoch's steps run;
// LocalRunner and PsRunner live in fit.cpp, MirroredRunner in fit_mirrored.cpp.

#include <functional>
#include <memory>
#include <optional>

#include "api/model_state.hpp"
#include "core/data/guard.hpp"
#include "troupe/fit.hpp"
#include "troupe/registry.hpp"

namespace troupe::fit_detail {

/// How one epoch's steps are run: in this process, as closures on the workers, or as one
/// mirrored replica.
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

inline core::Status check_dataset(const DatasetCreator& data) {
  if (data.registry == nullptr || data.registry->dataset(data.name) == nullptr)
    return core::make_error(core::Errc::not_found, "no dataset '" + data.name + "' registered");
  return {};
}

/// The training data of one fit(): the dataset function called once per input context
/// (files are read once, not every epoch), a fresh iterator each epoch (a reshuffling
/// dataset draws a new order), past the batches already done when resuming mid-epoch.
class EpochData {
 public:
  explicit EpochData(const DatasetCreator& data) : data_(data) {}

  /// A dataset function or iterator that throws (a data file missing or damaged: value()
  /// of its error) is that error, naming the dataset function.
  core::Expected<std::unique_ptr<core::Iterator<core::Batch>>> iterate(
      const core::InputContext& ctx, int64_t skip) {
    std::unique_ptr<core::Iterator<core::Batch>> it;
    auto st = core::guard_user_data("dataset '" + data_.name + "'", [&] {
      if (!dataset_ || ctx.input_pipeline_id != ctx_.input_pipeline_id ||
          ctx.num_input_pipelines != ctx_.num_input_pipelines ||
          ctx.num_replicas_in_sync != ctx_.num_replicas_in_sync) {
        dataset_.reset();
        dataset_.emplace((*data_.registry->dataset(data_.name))(ctx, data_.args));
        ctx_ = ctx;
      }
      it = dataset_->make_iterator();
      for (int64_t i = 0; i < skip; ++i)
        if (!it->next()) break;
    });
    if (!st) return st.error();
    return it;
  }

  /// The next batch of `it` (none: the data ended); what its iterator throws is an error.
  core::Expected<std::optional<core::Batch>> next(core::Iterator<core::Batch>& it) {
    std::optional<core::Batch> b;
    auto st = core::guard_user_data("dataset '" + data_.name + "'", [&] { b = it.next(); });
    if (!st) return st.error();
    return b;
  }

 private:
  const DatasetCreator& data_;
  core::InputContext ctx_;
  std::optional<core::Dataset<core::Batch>> dataset_;
};

/// Applies the last batch's gradients with the model's optimizer: dense weights whole,
/// each table by the rows its batch used, or, with `dense_tables` (mirrored: all-reduced
/// dense), by their dense gradients in `dense_grads` (per weight). The non-trainable
/// weights were moved by their layers. A loss-scaled step that overflowed is skipped.
inline core::Status apply_gradients(Model::State& st, bool dense_tables = false,
                                    std::vector<core::Tensor>* dense_grads = nullptr) {
  auto& g = st.replica.graph;
  if (!g->finish_scaled_step()) return {};  // float16 overflow: skipped, scale halved
  for (size_t w = 0; w < st.replica.params.size(); ++w) {
    if (!g->trains[w]) continue;
    auto& p = st.replica.params[w];
    const int t = g->table_of(w);
    core::Status ok =
        t < 0 ? st.optimizer->apply_dense(*p.value, *p.grad, st.slots[w])
        : dense_tables
            ? st.optimizer->apply_dense(*p.value, (*dense_grads)[w], st.slots[w])
            : st.optimizer->apply_sparse(*p.value, g->tables()[static_cast<size_t>(t)].ids,
                                         g->host_gradient(w), st.slots[w]);
    if (!ok) return ok;
  }
  return {};
}

/// One replica of a MultiWorkerMirroredStrategy (fit_mirrored.cpp).
std::unique_ptr<Runner> make_mirrored_runner(Model& model, MultiWorkerMirroredStrategy& strategy,
                                             const DatasetCreator& data);

}  // namespace troupe::fit_detail
