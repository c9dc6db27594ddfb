#pragma once

// troupe._troupe.KerasModel: a Keras model (a .keras file's bytes, or model.to_json()'s)
// trained, evaluated and scored by Troupe's C++ in this process, with NumPy in and out.
// The Python class troupe.keras.Model wraps it; every call that waits releases the GIL,
// and Python callbacks (and Ctrl-C) are served between steps on the calling thread.

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include "troupe/coordinator.hpp"
#include "troupe/fit.hpp"
#include "troupe/keras.hpp"

namespace troupe::python {

namespace py = pybind11;

class PsStrategy;

class KerasModel {
 public:
  KerasModel(const std::string& name, std::string bytes, const std::string& compile_json,
             const std::map<std::string, std::string>& labels, const std::string& device,
             const std::string& precision, uint64_t seed, bool save_compile);

  /// [{"name", "kind", "shape"}] of the model's inputs, of its outputs, of its label columns.
  py::list inputs();
  py::list outputs();
  py::list labels();

  /// Model.fit: `data` and `validation` are troupe.data specs as dicts (arrays or files);
  /// `callbacks` Python objects with Keras's callback methods, or Troupe's own by their
  /// "troupe" attribute (a dict); `owner` the Python Model whose stop_training callbacks
  /// set. Returns each epoch's logs.
  /// With `strategy` a PsStrategy, the chief's fit(): every step a closure on some
  /// worker, each worker reading its share of `data` (files only). With a MirroredStrategy,
  /// this worker's replica: its shard of `data` (arrays or files), `data`'s batch the
  /// global one, split among the replicas. Returns {"epochs": [logs...], "stats": {...}}
  /// (stats: the coordinator's or the ring's counts under a strategy).
  py::dict fit(const py::dict& data, const py::object& validation, int64_t epochs,
               int64_t steps_per_epoch, const py::list& callbacks, const py::object& owner,
               int verbose, bool batch_hooks, const py::object& strategy);
  /// Attached to a strategy: tells every PS and worker task to stop serving.
  void shutdown_cluster();

  // ClusterCoordinator from Python (the tutorial's custom loop): the model attached to
  // `strategy` and its coordinator made on first use.
  /// Every worker's iterator over its share of `data` (files), the model with it.
  PerWorkerDataset per_worker_dataset(const py::dict& data, PsStrategy& strategy);
  /// One closure of registered step `step` ("keras/train", "keras/evaluate", or one a C++
  /// extension registers in every worker) run `steps` times on some worker; its stats when
  /// it ends.
  RemoteValue<BatchStats> schedule(const PerWorkerDataset& dataset, const std::string& step,
                                   uint32_t steps);
  /// The compiled loss and metrics over every batch of `values` (closures' results, each
  /// waited for; their metric states merged, as a Keras metric updated by each).
  py::dict merged_logs(const std::vector<RemoteValue<BatchStats>>& values);
  /// Waits for every closure scheduled (GIL released); raises the first closure's error.
  void join();
  bool done();
  /// A closure's stats as Keras's logs (loss and the compiled metrics).
  py::dict logs(const BatchStats& stats);
  /// The coordinator's counts: closures scheduled, completed, retried; workers lost and
  /// rejoined ({} before it exists).
  py::dict cluster_stats();
  /// The compiled loss and metrics over `data`, as Keras's evaluate(return_dict=True).
  py::dict evaluate(const py::dict& data);
  /// TensorFlow's SidecarEvaluator: follows `checkpoint_dir` (a chief's ModelCheckpoint),
  /// scores each new checkpoint on `data` (a JSON line each on stdout), until the chief's
  /// final checkpoint (or `max_evaluations`; 0: no bound). Returns {"evaluations",
  /// "skipped", "last_step", "logs"}.
  py::dict sidecar_evaluate(const py::dict& data, const std::string& checkpoint_dir,
                            int64_t max_evaluations, double idle_timeout_s,
                            const std::string& log_dir);
  /// Every output for `x` (input name -> array), in batches of `batch`.
  py::list predict(const py::dict& x, int64_t batch);
  /// The model as a .keras file Keras loads, its weights as trained.
  void save(const std::string& path);
  /// The weights by path ("dense/kernel") as NumPy arrays.
  py::dict get_weights();

  const std::string& name() const { return source_->name; }
  const std::string& sha256() const { return source_->sha256; }
  int64_t steps() const { return steps_; }

 private:
  std::vector<core::Batch> batches_of(const py::dict& data, bool labels, const std::string& what);
  /// What every worker of a strategy's job reads: the files of `data` and the model
  /// without its tables, as the "keras" dataset's arguments.
  std::vector<char> keras_job(const py::dict& data);
  ClusterCoordinator& coordinator(PsStrategy& strategy);

  std::shared_ptr<const KerasSource> source_;
  KerasOptions options_;
  std::unique_ptr<Model> model_;
  std::vector<core::FeatureSpec> specs_;  // inputs, then label columns
  size_t inputs_ = 0;
  int64_t steps_ = 0;  // steps trained in all
};

}  // namespace troupe::python
