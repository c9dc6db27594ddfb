#pragma once

// Ctrl-C while C++ waits with the GIL released. Python's own handler only notes a signal;
// it runs when the interpreter next looks (PyErr_CheckSignals), which a thread blocked in
// C++ never does. So a call that waits either waits in slices and looks between them
// (wait_interruptibly), or hands the C++ loop a stop predicate that looks (Interrupt).

#include <chrono>
#include <functional>
#include <optional>

#include <pybind11/pybind11.h>

namespace troupe::python {

namespace py = pybind11;

/// How long a wait goes without looking for a signal.
inline constexpr std::chrono::milliseconds kSignalSlice{100};

/// Waits until `ready(slice)` (called with the GIL released, at most `slice` each) says
/// so; between calls runs Python's signal handlers, raising what one raises
/// (KeyboardInterrupt). Called with the GIL held.
template <class Ready>
void wait_interruptibly(Ready&& ready) {
  for (;;) {
    bool done = false;
    {
      py::gil_scoped_release release;
      done = ready(kSignalSlice);
    }
    if (done) return;
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
  }
}

/// A stop predicate for a C++ loop that runs on the thread that released the GIL (serve,
/// the side-car evaluator): asked without the GIL, it takes it to run the signal handlers
/// and keeps what one raised, for rethrow() once the loop has returned.
class Interrupt {
 public:
  std::function<bool()> predicate() {
    return [this] {
      if (raised_) return true;
      py::gil_scoped_acquire gil;
      if (PyErr_CheckSignals() == 0) return false;
      raised_.emplace();  // takes the pending exception
      return true;
    };
  }
  /// Raises what a signal handler raised, if one did. Called with the GIL held.
  void rethrow() {
    if (raised_) {
      py::error_already_set e = std::move(*raised_);
      raised_.reset();
      throw e;
    }
  }

 private:
  std::optional<py::error_already_set> raised_;
};

}  // namespace troupe::python
