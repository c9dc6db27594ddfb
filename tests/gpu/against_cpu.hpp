#pragma once

// What tests/gpu's suites share: a result compared element by element with the CPU
// backend's, kernel bodies run on the host as their launchers run them on a device, and
// (for the suites that link the CUDA backend, with TROUPE_TEST_CUDA defined) the GPU's
// presence and its backend.

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>

#include "core/cpu/cpu_backend.hpp"
#include "core/tensor.hpp"

namespace troupe::test {

/// The CPU backend every suite compares against.
inline core::CpuBackend cpu;

/// |a - cpu| <= rel * max(1, |a|, |cpu|) for every element of two host tensors; the first
/// element that is not fails the test, naming `what` and where `a` came from (`here`).
inline void close_to_cpu(const core::Tensor& a, const core::Tensor& cpu, float rel,
                         const std::string& what, const char* here = "here") {
  REQUIRE(a.size() == cpu.size());
  for (int64_t i = 0; i < a.size(); ++i) {
    const float tol = rel * std::max(1.0f, std::max(std::fabs(a[i]), std::fabs(cpu[i])));
    if (!(std::fabs(a[i] - cpu[i]) <= tol))
      FAIL(what << ": element " << i << " is " << a[i] << " " << here << " and " << cpu[i]
                << " on the CPU");
  }
}

/// What a launcher does on the device, on the host: body(i) for every i in [0, n).
inline void run_body(int64_t n, const std::function<void(int64_t)>& body) {
  for (int64_t i = 0; i < n; ++i)
    body(i);
}

}  // namespace troupe::test

#ifdef TROUPE_TEST_CUDA
#include "core/backend.hpp"
#include "gpu/cuda.hpp"
#include "gpu/cuda_devices.hpp"

namespace troupe::test {

inline const core::Device gpu0 = core::Device::cuda(0);

/// Whether a GPU is here; without one the case warns that it skipped.
inline bool have_gpu() {
  gpu::register_cuda_devices();
  if (gpu::device_count() > 0) return true;
  WARN("no GPU: skipped (run tests/gpu on a machine with one)");
  return false;
}

inline core::Backend& cuda() {
  return *core::backend_for(gpu0).value();
}

/// A device result, once the device is done, against the CPU's.
inline void gpu_close_to_cpu(const core::Tensor& device_result, const core::Tensor& cpu, float rel,
                             const std::string& what) {
  REQUIRE(cuda().synchronize().ok());
  close_to_cpu(device_result.to(core::Device::cpu()), cpu, rel, what, "on the GPU");
}

}  // namespace troupe::test
#endif
