#pragma once

// For a C++ extension module of `import troupe` that gives the workers steps of its own:
// it adds them to the registry every task of a Python job serves, when it is imported.
// Every task runs the same script, so importing the extension before Server.join() puts
// the steps in each worker; the chief schedules them by name on a model's per-worker
// dataset:
//
//   // my_steps.cpp, built with pybind11 against the same Troupe build
//   PYBIND11_MODULE(my_steps, m) {
//     troupe::extension::worker_registry().add_step(
//         "my/label_mean",
//         [](troupe::StepContext& ctx, troupe::PerWorkerDataset ds)
//             -> troupe::core::Expected<troupe::BatchStats> {
//           auto batch = ctx.next_batch(ds);  ...
//         });
//   }
//
//   # the script
//   import my_steps  # noqa: F401  (registers its steps)
//   value = coordinator.schedule(model.registered_step("my/label_mean"),
//                                args=(per_worker_iterator,))
//   value.fetch()    # the BatchStats as logs: "loss" is loss_sum / examples
//
// A step takes the StepContext and the PerWorkerDataset, and returns BatchStats.

#include <pybind11/pybind11.h>

#include "core/runtime/registry.hpp"
#include "troupe/model.hpp"

namespace troupe::extension {

/// The registry of troupe._troupe (imported here if it is not yet).
inline Registry& worker_registry() {
  namespace py = pybind11;
  py::capsule c = py::module_::import("troupe._troupe").attr("_worker_registry")();
  return *static_cast<Registry*>(c.get_pointer());
}

}  // namespace troupe::extension
