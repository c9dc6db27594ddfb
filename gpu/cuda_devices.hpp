#pragma once

// The CUDA devices of this process behind core::DeviceProvider: how many it sees (after
// CUDA_VISIBLE_DEVICES), what they are, and one CudaBackend each, made on first use.
// register_cuda_devices() makes core::select_device and core::backend_for find them;
// troupe::select_device (include/troupe/devices.hpp) calls it.

#include <string>

namespace troupe::gpu {

/// Registers this process's CUDA devices with core (idempotent).
void register_cuda_devices();

}  // namespace troupe::gpu
