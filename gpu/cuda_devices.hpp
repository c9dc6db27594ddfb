#pragma once

// The CUDA devices of this process behind core::DeviceProvider: how many it sees (after
// CUDA_VISIBLE_DEVICES), what they are, and one CudaBackend each, made on first use.
// register_cuda_devices() makes core::select_device and core::backend_for find them (the
// GPU tests call it); a program reaches them through libtroupe_gpu.so (gpu/module.hpp),
// which troupe::select_device loads when a CUDA device is asked for.

#include "core/backend.hpp"

namespace troupe::gpu {

/// This process's CUDA devices (one provider, made on first call, never destroyed).
core::DeviceProvider* cuda_device_provider();

/// Registers this process's CUDA devices with core (idempotent).
void register_cuda_devices();

}  // namespace troupe::gpu
