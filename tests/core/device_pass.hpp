#pragma once

// The device the layer checks (graph_check.hpp, keras_reference.hpp) run on after the CPU.
// In graph_tests and layer_reference_tests it is the fake CUDA device (fake_device.hpp):
// the device pathway around the CPU's kernels. The same sources built as gpu_layer_tests
// (TROUPE_TEST_REAL_CUDA) run on the GPU and its CUDA kernels instead, and without a GPU
// they warn that the device pass skipped.
//
//   DevicePass device;             // cuda:0 is the device under test while it lives
//   if (device.here()) { ... g.to(core::Device::cuda(0)) ... }

#include <catch2/catch.hpp>

#include <optional>

#include "fake_device.hpp"

#ifdef TROUPE_TEST_REAL_CUDA
#include "gpu/cuda.hpp"
#include "gpu/cuda_devices.hpp"
#endif

namespace troupe::test {

#ifdef TROUPE_TEST_REAL_CUDA
inline constexpr const char* kDevicePassName = "gpu";

class DevicePass {
 public:
  DevicePass() {
    gpu::register_cuda_devices();
    here_ = gpu::device_count() > 0;
    if (!here_) WARN("no GPU: the device pass skipped (run gpu_layer_tests on a machine with one)");
  }
  bool here() const { return here_; }

 private:
  bool here_ = false;
};
#else
inline constexpr const char* kDevicePassName = "fake device";

class DevicePass {
 public:
  DevicePass() : fake_(1) {}
  bool here() const { return true; }

 private:
  FakeCuda fake_;
};
#endif

}  // namespace troupe::test
