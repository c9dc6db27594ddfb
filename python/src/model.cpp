#include "python/src/model.hpp"

#include <chrono>
#include <iostream>
#include <mutex>
#include <optional>

#include <pybind11/stl.h>

#include "core/data/named_input.hpp"
#include "python/src/arrays.hpp"
#include "python/src/distribute.hpp"
#include "python/src/errors.hpp"
#include "python/src/interrupt.hpp"
#include "python/src/local_data.hpp"
#include "troupe/callbacks.hpp"
#include "troupe/evaluator.hpp"
#include "troupe/registry.hpp"

namespace troupe::python {

namespace {

const char* kind_name(core::ColumnKind k) {
  return k == core::ColumnKind::floats ? "float32"
         : k == core::ColumnKind::ints ? "int64"
                                       : "string";
}

py::dict spec_dict(const std::string& name, core::ColumnKind kind,
                   const std::vector<int64_t>& shape) {
  py::dict d;
  d["name"] = name;
  d["dtype"] = kind_name(kind);
  py::tuple t(shape.size());
  for (size_t i = 0; i < shape.size(); ++i)
    t[i] = shape[i];
  d["shape"] = t;
  return d;
}

py::dict logs_dict(const Logs& logs) {
  py::dict d;
  for (const auto& [k, v] : logs)
    d[py::str(k)] = v;
  return d;
}

// Python's side of fit(): the user's callbacks with Keras's method names, called on this
// (the calling) thread between steps with the GIL held; Ctrl-C checked after every step.
// What Python raises is kept and raised again when fit() returns.
class PythonCallbacks final : public Callback {
 public:
  PythonCallbacks(py::list callbacks, py::object owner, int64_t interval, bool batch_hooks)
      : callbacks_(std::move(callbacks)),
        owner_(std::move(owner)),
        interval_(interval),
        batch_hooks_(batch_hooks) {}

  core::Status on_train_begin(FitState&) override {
    return call("on_train_begin", [](py::handle f) { f(py::dict()); });
  }
  core::Status on_epoch_begin(FitState& s) override {
    batch_ = 0;
    return call("on_epoch_begin", [&](py::handle f) { f(s.epoch, py::dict()); });
  }
  core::Status on_train_batch_end(FitState& s, const Logs& logs) override {
    const int64_t batch = batch_++;
    steps = s.step;
    auto st = call(
        "on_train_batch_end", [&](py::handle f) { f(batch, logs_dict(logs)); }, true);
    return st ? stop_asked(s) : st;
  }
  core::Status on_epoch_end(FitState& s, const Logs& logs) override {
    steps = s.step;
    auto st = call(
        "on_epoch_end", [&](py::handle f) { f(s.epoch, logs_dict(logs)); }, true);
    return st ? stop_asked(s) : st;
  }
  core::Status on_train_end(FitState&, const Logs& logs) override {
    return call("on_train_end", [&](py::handle f) { f(logs_dict(logs)); });
  }
  // The points where Ctrl-C can be seen while C++ trains: after every step in one process;
  // under a strategy, where fit() waits for every closure in flight, every interval_ steps
  // (every step only where a Python callback asks for each batch).
  int64_t batch_interval() const override { return interval_; }
  // Only a callback's own on_train_batch_end reads the logs; a point kept for Ctrl-C
  // alone does not make fit() compute the metrics at every step.
  bool reads_batch_logs() const override { return batch_hooks_; }

  /// What a callback raised (or KeyboardInterrupt), to raise from fit().
  std::optional<py::error_already_set> raised;
  /// Steps done in all at the last batch-level point or epoch end (where an interrupted
  /// fit() stopped: under a strategy no closure is in flight there).
  int64_t steps = 0;

 private:
  // Ctrl-C is looked for only at the points where fit() agrees among mirrored workers
  // (after a batch-level point, at an epoch's end), so every worker stops at the same one.
  template <class Call>
  core::Status call(const char* method, Call&& invoke, bool signals = false) {
    py::gil_scoped_acquire gil;
    try {
      if (signals && PyErr_CheckSignals() != 0) throw py::error_already_set();
      for (py::handle cb : callbacks_)
        if (py::hasattr(cb, method)) invoke(cb.attr(method));
    } catch (py::error_already_set& e) {
      raised.emplace(std::move(e));
      return core::make_error(core::Errc::cancelled, std::string("stopped in ") + method);
    }
    return {};
  }
  // Keras's way to stop: a callback sets model.stop_training.
  core::Status stop_asked(FitState& s) {
    py::gil_scoped_acquire gil;
    if (!owner_.is_none() && py::hasattr(owner_, "stop_training") &&
        py::bool_(owner_.attr("stop_training"))) {
      s.stop_training = true;
      owner_.attr("stop_training") = false;
    }
    return {};
  }

  py::list callbacks_;
  py::object owner_;
  int64_t interval_;
  bool batch_hooks_;
  int64_t batch_ = 0;
};

// One of Troupe's own callbacks, described by its Python class (troupe.keras.callbacks).
std::shared_ptr<Callback> builtin_callback(const py::dict& d) {
  namespace cb = callbacks;
  const auto type = d["type"].cast<std::string>();
  if (type == "BackupAndRestore") {
    cb::BackupAndRestoreCallback::Options o;
    o.save_freq_steps = d["save_freq"].cast<int64_t>();
    return std::make_shared<cb::BackupAndRestoreCallback>(d["backup_dir"].cast<std::string>(), o);
  }
  if (type == "ModelCheckpoint") {
    cb::ModelCheckpoint::Options o;
    o.save_freq_steps = d["save_freq"].cast<int64_t>();
    o.save_best_only = d["save_best_only"].cast<bool>();
    o.monitor = d["monitor"].cast<std::string>();
    o.max_to_keep = d["max_to_keep"].cast<int>();
    return std::make_shared<cb::ModelCheckpoint>(d["directory"].cast<std::string>(), o);
  }
  if (type == "TensorBoard") {
    cb::TensorBoard::Options o;
    o.update_freq_steps = d["update_freq"].cast<int64_t>();
    return std::make_shared<cb::TensorBoard>(d["log_dir"].cast<std::string>(), o);
  }
  if (type == "EarlyStopping") {
    cb::EarlyStopping::Options o;
    o.monitor = d["monitor"].cast<std::string>();
    o.min_delta = d["min_delta"].cast<double>();
    o.patience = d["patience"].cast<int64_t>();
    return std::make_shared<cb::EarlyStopping>(o);
  }
  invalid("no Troupe callback '" + type + "'");
}

}  // namespace

KerasModel::KerasModel(const std::string& name, std::string bytes, const std::string& compile_json,
                       const std::map<std::string, std::string>& labels, const std::string& device,
                       const std::string& precision, uint64_t seed, bool save_compile)
    : source_(keras_source(name, std::move(bytes))) {
  options_.compile_json = compile_json;
  options_.save_compile = save_compile;
  options_.seed = seed;
  options_.labels = labels;
  ModelSpec spec;
  spec.keras = source_;
  spec.keras_options = options_;
  spec.device = device;
  spec.precision = precision;
  model_ = std::make_unique<Model>(spec);
  check(model_->status());
  specs_ = model_->data_specs();
  inputs_ = model_->graph().inputs().size();
}

py::list KerasModel::inputs() {
  py::list out;
  for (const auto& in : model_->graph().inputs())
    out.append(spec_dict(in.name, in.spec.kind, in.spec.shape));
  return out;
}

py::list KerasModel::outputs() {
  py::list out;
  for (const auto& o : model_->graph().outputs())
    out.append(spec_dict(o.name, o.spec.kind, o.spec.shape));
  return out;
}

py::list KerasModel::labels() {
  py::list out;
  for (size_t i = inputs_; i < specs_.size(); ++i)
    out.append(spec_dict(specs_[i].name, specs_[i].kind, specs_[i].shape));
  return out;
}

std::vector<core::Batch> KerasModel::batches_of(const py::dict& data, bool labels,
                                                const std::string& what) {
  std::vector<core::FeatureSpec> specs = specs_;
  if (!labels) specs.resize(inputs_);
  const auto kind = data["kind"].cast<std::string>();
  const auto batch = data["batch"].cast<size_t>();
  if (kind == "arrays") {
    const auto table = read_arrays(data["arrays"].cast<py::dict>(), specs, what);
    py::gil_scoped_release release;
    return all_batches(table, batch);
  }
  FileData f = file_data(data, specs);
  f.options.drop_remainder = false;  // every example counts
  py::gil_scoped_release release;
  return take(core::read_named_batches(f.files, f.options));
}

py::dict KerasModel::fit(const py::dict& data, const py::object& validation, int64_t epochs,
                         int64_t steps_per_epoch, const py::list& callbacks,
                         const py::object& owner, int verbose, bool batch_hooks,
                         const py::object& strategy) {
  Registry registry;
  DatasetCreator creator{&registry, "python", {}};
  PsStrategy* ps = nullptr;
  MirroredStrategy* mirror = nullptr;
  // KeyboardInterrupt raised in a dataset function, to raise from fit().
  auto interrupted = std::make_shared<std::optional<py::error_already_set>>();
  if (py::isinstance<MirroredStrategy>(strategy))
    mirror = &strategy.cast<MirroredStrategy&>();
  else if (!strategy.is_none())
    ps = &strategy.cast<PsStrategy&>();
  if (ps != nullptr) {
    // Every worker reads its share of the files; the model reaches it as data.
    creator = DatasetCreator{&keras_registry(), "keras", keras_job(data)};
  } else if (data["kind"].cast<std::string>() == "function") {
    // distribute_datasets_from_function: the Python function of the InputContext, called
    // again whenever the ring re-forms; its dataset is this replica's, as it gives it.
    auto fn = std::shared_ptr<py::object>(new py::object(data["fn"]), [](py::object* o) {
      py::gil_scoped_acquire gil;
      delete o;
    });
    auto specs = specs_;
    registry.add_dataset("python", [fn, specs, interrupted](const core::InputContext& ctx) {
      std::shared_ptr<const LocalData> d;
      {
        py::gil_scoped_acquire gil;
        try {
          d = local_data(
              (*fn)(ctx.num_input_pipelines, ctx.input_pipeline_id, ctx.num_replicas_in_sync)
                  .cast<py::dict>(),
              specs);
        } catch (py::error_already_set& e) {
          // Ctrl-C in the function stops fit() with KeyboardInterrupt, as anywhere else.
          const bool ctrl_c = e.matches(PyExc_KeyboardInterrupt);
          const std::string what = e.what();
          if (ctrl_c) *interrupted = std::move(e);
          throw core::BadExpectedAccess(
              core::make_error(ctrl_c ? core::Errc::cancelled : core::Errc::invalid_argument,
                               "the dataset function raised " + what));
        }
      }
      // Its dataset as the function gives it: sharded where it shards (TensorFlow does not
      // shard what distribute_datasets_from_function's function returns).
      return local_dataset(d, core::InputContext{}, false);
    });
  } else {
    // Arrays or files in this process: one pipeline, or (mirrored) this replica's shard of
    // the examples and of the global batch, again whenever the ring re-forms.
    std::shared_ptr<const LocalData> d = local_data(data, specs_);
    const bool mirrored = mirror != nullptr;
    registry.add_dataset("python", [d, mirrored](const core::InputContext& ctx) {
      return local_dataset(d, mirrored ? ctx : core::InputContext{}, mirrored);
    });
  }
  FitOptions fo;
  fo.epochs = epochs;
  fo.steps_per_epoch = steps_per_epoch;
  if (!validation.is_none()) {
    auto batches = std::make_shared<const std::vector<core::Batch>>(
        batches_of(validation.cast<py::dict>(), true, "validation_data"));
    model_->set_eval_batches(std::move(batches));
    fo.validation = FitOptions::Validation::direct;
  }
  Callbacks all;
  for (py::handle cb : callbacks)
    if (py::hasattr(cb, "_troupe_callback"))
      all.push_back(builtin_callback(cb.attr("_troupe_callback").cast<py::dict>()));
  constexpr int64_t kInterruptSteps = 100;  // under a strategy, without batch hooks
  auto python = std::make_shared<PythonCallbacks>(
      callbacks, owner, (ps == nullptr && mirror == nullptr) || batch_hooks ? 1 : kInterruptSteps,
      batch_hooks);
  all.push_back(python);
  if (verbose > 0) {  // Keras's progress bar (1) or a line per epoch (2), on stderr
    callbacks::ProgressDisplay::Options po;
    po.style = verbose == 1 ? callbacks::ProgressDisplay::Style::keras_bar
                            : callbacks::ProgressDisplay::Style::keras_epoch;
    all.push_back(std::make_shared<callbacks::ProgressDisplay>(std::cerr, po));
  }

  core::Expected<History> h = core::make_error(core::Errc::internal, "not run");
  {
    py::gil_scoped_release release;
    h = ps != nullptr       ? troupe::fit(*model_, ps->get(), creator, fo, all)
        : mirror != nullptr ? troupe::fit(*model_, mirror->get(), creator, fo, all)
                            : troupe::fit(*model_, creator, fo, all);
  }
  if (python->raised || *interrupted || !h)
    steps_ = std::max(steps_, python->steps);  // where it stopped
  if (python->raised) throw std::move(*python->raised);
  if (*interrupted) throw std::move(**interrupted);
  if (!h) throw TroupeError(h.error());
  steps_ = h->steps;
  py::list epochs_logs;
  for (const auto& logs : h->epochs)
    epochs_logs.append(logs_dict(logs));
  py::dict stats;
  stats["steps"] = h->steps;
  stats["steps_run"] = h->steps_run;
  stats["train_s"] = h->train_s;
  if (ps != nullptr) {
    stats["workers"] = ps->num_workers();
    stats["workers_lost"] = h->stats.workers_lost;
    stats["closures_retried"] = h->stats.retried;
    stats["worker_rejoins"] = h->stats.worker_rejoins;
  }
  if (mirror != nullptr) {
    stats["workers"] = mirror->num_replicas_in_sync();
    stats["is_chief"] = mirror->is_chief();
    stats["workers_lost"] = h->mirrored.workers_lost;
    stats["workers_joined"] = h->mirrored.workers_joined;
    stats["steps_redone"] = h->mirrored.steps_redone;
  }
  py::dict out;
  out["epochs"] = epochs_logs;
  out["stats"] = stats;
  return out;
}

std::vector<char> KerasModel::keras_job(const py::dict& data) {
  if (data["kind"].cast<std::string>() != "files")
    invalid(
        "a ParameterServerStrategy's workers each read their share of the data: give a "
        "troupe.data dataset of files (arrays stay in this process)");
  if (!data["shard"].is_none())
    invalid(
        "under a ParameterServerStrategy each worker reads its own share of the files "
        "already (no shard())");
  const FileData f = file_data(data, specs_);
  KerasJob job;
  job.source = take(worker_keras_source(*model_));
  job.options = options_;
  job.files = f.files;
  job.data = f.options;
  job.data.features.clear();  // each worker's from the model
  job.data.epochs = -1;       // each worker's share repeats: an epoch is steps_per_epoch
  job.device = model_->spec().device;
  job.precision = model_->spec().precision;
  return encode_keras_job(job);
}

ClusterCoordinator& KerasModel::coordinator(PsStrategy& strategy) {
  if (model_->strategy() == nullptr) check(model_->attach(strategy.get()));
  return *take(model_->coordinator());
}

PerWorkerDataset KerasModel::per_worker_dataset(const py::dict& data, PsStrategy& strategy) {
  auto args = keras_job(data);
  py::gil_scoped_release release;  // attaching creates the variables on the PS tasks
  return take(coordinator(strategy).create_per_worker_dataset("keras", args));
}

RemoteValue<BatchStats> KerasModel::schedule(const PerWorkerDataset& dataset,
                                             const std::string& step, uint32_t steps) {
  auto* c = model_->coordinator_if_made();
  if (c == nullptr) invalid("schedule: the model has no per-worker dataset yet");
  py::gil_scoped_release release;  // with max_pending_closures, waits for room
  return c->schedule_repeated<BatchStats>(step, steps, dataset);
}

py::dict KerasModel::merged_logs(const std::vector<RemoteValue<BatchStats>>& values) {
  if (values.empty()) invalid("no results to merge");
  BatchStats all;
  for (size_t i = 0; i < values.size(); ++i) {
    wait_interruptibly([&](auto slice) { return values[i].wait_for(slice); });
    auto s = values[i].fetch();
    if (!s) throw TroupeError(s.error());
    if (i == 0)
      all = *s;
    else
      all.merge(*s);
  }
  return logs(all);
}

void KerasModel::join() {
  auto* c = model_->coordinator_if_made();
  if (c == nullptr) return;
  wait_interruptibly([c](auto slice) { return c->wait_done(slice); });
  check(c->join());  // settled: returns at once
}

bool KerasModel::done() {
  auto* c = model_->coordinator_if_made();
  return c == nullptr || c->done();
}

py::dict KerasModel::cluster_stats() {
  py::dict d;
  auto* c = model_->coordinator_if_made();
  if (c == nullptr) return d;
  const CoordinatorStats s = c->stats();
  d["closures_scheduled"] = s.scheduled;
  d["closures_completed"] = s.completed;
  d["closures_retried"] = s.retried;
  d["workers_lost"] = s.workers_lost;
  d["worker_rejoins"] = s.worker_rejoins;
  return d;
}

py::dict KerasModel::logs(const BatchStats& stats) {
  return logs_dict(model_->logs(stats));
}

void KerasModel::shutdown_cluster() {
  py::gil_scoped_release release;
  if (auto* c = model_->coordinator_if_made()) check(c->shutdown_cluster());
}

py::dict KerasModel::evaluate(const py::dict& data) {
  auto batches =
      std::make_shared<const std::vector<core::Batch>>(batches_of(data, true, "evaluate's x"));
  core::Expected<BatchStats> stats = core::make_error(core::Errc::internal, "not run");
  {
    py::gil_scoped_release release;
    model_->set_eval_batches(batches);
    stats = model_->evaluate();
  }
  if (!stats) throw TroupeError(stats.error());
  return logs_dict(model_->logs(*stats));
}

py::dict KerasModel::sidecar_evaluate(const py::dict& data, const std::string& checkpoint_dir,
                                      int64_t max_evaluations, double idle_timeout_s,
                                      const std::string& log_dir) {
  auto batches = std::make_shared<const std::vector<core::Batch>>(
      batches_of(data, true, "the evaluator's data"));
  SidecarEvaluatorOptions o;
  o.checkpoint_dir = checkpoint_dir;
  o.logdir = log_dir;
  o.max_evaluations = max_evaluations;
  o.idle_timeout = std::chrono::milliseconds(static_cast<int64_t>(idle_timeout_s * 1000));
  Interrupt interrupt;
  o.stop = interrupt.predicate();
  core::Expected<SidecarResult> r = core::make_error(core::Errc::internal, "not run");
  {
    py::gil_scoped_release release;
    model_->set_eval_batches(batches);
    r = run_sidecar_evaluator(*model_, o, std::cout);
  }
  interrupt.rethrow();
  if (!r) throw TroupeError(r.error());
  py::dict out;
  out["evaluations"] = r->evaluations;
  out["skipped"] = r->skipped;
  out["last_step"] = r->last_step;
  out["logs"] = logs_dict(r->last_logs);
  return out;
}

py::list KerasModel::predict(const py::dict& x, int64_t batch) {
  py::dict data;
  data["kind"] = "arrays";
  data["arrays"] = x;
  data["batch"] = batch;
  const auto batches = batches_of(data, false, "predict's x");
  const auto& outs = model_->graph().outputs();
  std::vector<std::vector<float>> values(outs.size());
  int64_t examples = 0;
  {
    py::gil_scoped_release release;
    for (const auto& b : batches) {
      const auto ys = take(model_->predict(b));
      for (size_t i = 0; i < outs.size(); ++i)
        values[i].insert(values[i].end(), ys[i].data(), ys[i].data() + ys[i].size());
      examples += b.size();
    }
  }
  py::list out;
  for (size_t i = 0; i < outs.size(); ++i) {
    std::vector<int64_t> shape{examples};
    shape.insert(shape.end(), outs[i].spec.shape.begin(), outs[i].spec.shape.end());
    out.append(to_numpy(std::move(values[i]), shape));
  }
  return out;
}

void KerasModel::save(const std::string& path) {
  py::gil_scoped_release release;
  check(save_keras(*model_, path));
}

py::dict KerasModel::get_weights() {
  const core::Checkpoint ckpt = take(model_->read_weights());
  py::dict out;
  for (const auto& [name, t] : ckpt.tensors) {
    const core::Tensor host = t.to(core::Device::cpu());
    std::vector<int64_t> shape;
    for (int d = 0; d < host.shape().rank(); ++d)
      shape.push_back(host.shape()[d]);
    out[py::str(name)] =
        to_numpy(std::vector<float>(host.data(), host.data() + host.size()), shape);
  }
  return out;
}

}  // namespace troupe::python
