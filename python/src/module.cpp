// troupe._troupe: the C++ side of `import troupe`. The Python package (python/troupe/)
// gives it TensorFlow's and Keras's shapes; everything here is the C++ API under it, and
// every error is raised as the troupe.errors class of its code.

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "python/src/arrays.hpp"
#include "python/src/distribute.hpp"
#include "python/src/errors.hpp"
#include "python/src/interrupt.hpp"
#include "python/src/model.hpp"

namespace py = pybind11;
using troupe::python::Jobs;
using troupe::python::KerasModel;
using troupe::python::PsStrategy;
using troupe::python::TroupeError;

PYBIND11_MODULE(_troupe, m) {
  m.doc() = "Troupe's C++ runtime (use the troupe package, not this module)";

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const TroupeError& e) {
      py::object cls = py::module_::import("troupe.errors")
                           .attr("error_class")(troupe::core::errc_name(e.code()));
      PyErr_SetObject(cls.ptr(), py::str(e.what()).ptr());
    }
  });

  py::class_<KerasModel>(m, "KerasModel")
      .def(py::init<const std::string&, std::string, const std::string&,
                    const std::map<std::string, std::string>&, const std::string&,
                    const std::string&, uint64_t, bool>(),
           py::arg("name"), py::arg("data"), py::arg("compile_json") = "",
           py::arg("labels") = std::map<std::string, std::string>{}, py::arg("device") = "cpu",
           py::arg("precision") = "float32", py::arg("seed") = 1, py::arg("save_compile") = false,
           // Reading a large .keras file and building the graph: no Python meanwhile.
           py::call_guard<py::gil_scoped_release>())
      .def("inputs", &KerasModel::inputs)
      .def("outputs", &KerasModel::outputs)
      .def("labels", &KerasModel::labels)
      .def("fit", &KerasModel::fit, py::arg("data"), py::arg("validation"), py::arg("epochs"),
           py::arg("steps_per_epoch"), py::arg("callbacks"), py::arg("owner"), py::arg("verbose"),
           py::arg("batch_hooks"), py::arg("strategy"))
      .def("shutdown_cluster", &KerasModel::shutdown_cluster)
      .def("per_worker_dataset", &KerasModel::per_worker_dataset, py::arg("data"),
           py::arg("strategy"))
      .def("schedule", &KerasModel::schedule, py::arg("dataset"), py::arg("step"), py::arg("steps"))
      .def("merged_logs", &KerasModel::merged_logs, py::arg("values"))
      .def("join", &KerasModel::join)
      .def("done", &KerasModel::done)
      .def("logs", &KerasModel::logs)
      .def("cluster_stats", &KerasModel::cluster_stats)
      .def("evaluate", &KerasModel::evaluate, py::arg("data"))
      .def("sidecar_evaluate", &KerasModel::sidecar_evaluate, py::arg("data"),
           py::arg("checkpoint_dir"), py::arg("max_evaluations"), py::arg("idle_timeout_s"),
           py::arg("log_dir"))
      .def("predict", &KerasModel::predict, py::arg("x"), py::arg("batch"))
      .def("save", &KerasModel::save, py::arg("path"))
      .def("get_weights", &KerasModel::get_weights)
      .def_property_readonly("name", &KerasModel::name)
      .def_property_readonly("sha256", &KerasModel::sha256)
      .def_property_readonly("steps", &KerasModel::steps);

  m.def("write_tfrecord", &troupe::python::write_tfrecord, py::arg("path"), py::arg("arrays"));
  py::class_<troupe::PerWorkerDataset>(m, "PerWorkerDataset")
      .def_readonly("name", &troupe::PerWorkerDataset::name);
  py::class_<troupe::BatchStats>(m, "BatchStats");
  // A closure's result: fetch() waits for it (GIL released, Ctrl-C seen) and gives its
  // BatchStats, or raises its error (a cancelled closure: CancelledError).
  py::class_<troupe::RemoteValue<troupe::BatchStats>>(m, "RemoteStats")
      .def("ready", &troupe::RemoteValue<troupe::BatchStats>::ready)
      .def("fetch", [](const troupe::RemoteValue<troupe::BatchStats>& v) {
        troupe::python::wait_interruptibly([&](auto slice) { return v.wait_for(slice); });
        return troupe::python::take(v.fetch());  // settled: returns at once
      });

  // The registry every task serves, for C++ extensions to add steps to
  // (include/troupe/python_extension.hpp).
  m.def("_worker_registry",
        [] { return py::capsule(&troupe::python::worker_registry(), "troupe.Registry"); });
  m.def("resolve_cluster", &troupe::python::resolve_cluster);
  m.def("serve", &troupe::python::serve_task, py::arg("cluster"), py::arg("task_type"),
        py::arg("task_id"));
  py::class_<PsStrategy>(m, "PsStrategy")
      .def(py::init<const Jobs&, const std::string&, int, const py::object&, int>(),
           py::arg("cluster"), py::arg("task_type"), py::arg("task_id"), py::arg("partitioner"),
           py::arg("ps_replicas"))
      .def_property_readonly("num_workers", &PsStrategy::num_workers);

  py::class_<troupe::python::MirroredStrategy>(m, "MirroredStrategy")
      .def(py::init<const Jobs&, const std::string&, int, const py::dict&>(), py::arg("cluster"),
           py::arg("task_type"), py::arg("task_id"), py::arg("options"))
      .def_property_readonly("num_replicas_in_sync",
                             &troupe::python::MirroredStrategy::num_replicas_in_sync)
      .def_property_readonly("worker_index", &troupe::python::MirroredStrategy::worker_index)
      .def_property_readonly("is_chief", &troupe::python::MirroredStrategy::is_chief)
      .def("stats", &troupe::python::MirroredStrategy::stats);

  m.def("errc_names", [] {
    std::vector<std::string> names;
    for (int c = 1; c <= static_cast<int>(troupe::core::Errc::permission_denied); ++c)
      names.push_back(troupe::core::errc_name(static_cast<troupe::core::Errc>(c)));
    return names;
  });
}
