#pragma once

// The CUDA backend as a module the runtime loads when a CUDA device or NCCL is asked for
// (libtroupe_gpu.so, built with TROUPE_WITH_CUDA): a process that computes on the CPU maps
// none of CUDA's libraries. cuBLASLt alone is ~96 MB of private memory per process once
// loaded, which a job of hundreds of CPU workers on one host cannot pay.
//
//   auto m = gpu::load_module();             // dlopen once; the error names the file
//   if (m) core::register_device_provider(core::DeviceKind::cuda, (*m)->devices());
//
// This header includes no CUDA header: the runtime (api/) compiles against it alone. The
// module is built from the same sources as the program that loads it; `abi` guards against
// a module of another build, whose types might be laid out differently.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "core/backend.hpp"
#include "core/collective/collective.hpp"
#include "core/expected.hpp"

namespace troupe::gpu {

/// Copies rank 0's `n` bytes at `bytes` to every rank (NCCL's unique id).
using ShareId = std::function<core::Status(char* bytes, size_t n)>;

struct ModuleApi {
  /// The CUDA devices this process sees, behind core's provider interface.
  core::DeviceProvider* (*devices)();
  /// GPUs this process can use (0: none, or no driver).
  int (*device_count)();
  /// `device`'s PCI bus id into `out` (NUL-terminated); false where CUDA cannot say.
  bool (*pci_bus_id)(int device, char* out, size_t n);
  /// An NCCL all-reduce for one rank of `size` on `device`, host buffers staged through
  /// device memory.
  core::Expected<std::unique_ptr<collective::Implementation>> (*make_nccl)(int rank, int size,
                                                                           int device,
                                                                           const ShareId& share_id);
  /// Ends an implementation make_nccl made without waiting for the other ranks.
  void (*abort_nccl)(collective::Implementation& nccl);
};

/// What the module and its loader agree on: bumped with ModuleApi, and the sizes of the
/// types that cross between them.
inline uint64_t module_abi() {
  return (uint64_t{1} << 56) ^ (sizeof(ModuleApi) << 40) ^
         (sizeof(collective::AllReduceOptions) << 24) ^ (sizeof(core::Tensor) << 8) ^
         sizeof(core::Error);
}

/// The entry point the module exports (extern "C", named module_entry_name): its API when
/// `abi` is the loader's module_abi(), else nullptr.
using ModuleEntry = const ModuleApi* (*)(uint64_t abi);
inline constexpr const char* module_entry_name = "troupe_gpu_module";
inline constexpr const char* module_file_name = "libtroupe_gpu.so";

/// Loads the module once per process: from $TROUPE_GPU_MODULE when set, else from ../lib/
/// or beside the shared library this code is in (a Python extension), then the program,
/// then where cmake --install puts it.
/// An error names each file tried and why it did not load (the loader's own words:
/// a missing libcudart, a module of another build).
core::Expected<const ModuleApi*> load_module();

}  // namespace troupe::gpu
