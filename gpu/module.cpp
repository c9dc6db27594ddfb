// libtroupe_gpu.so's entry: the CUDA devices and NCCL behind gpu/module.hpp's table.
#include "gpu/module.hpp"

#include <cuda_runtime_api.h>

#include "gpu/cuda.hpp"
#include "gpu/cuda_devices.hpp"
#include "gpu/nccl.hpp"

namespace troupe::gpu {
namespace {

bool pci_bus_id(int device, char* out, size_t n) {
  if (n == 0) return false;
  if (cudaDeviceGetPCIBusId(out, static_cast<int>(n), device) != cudaSuccess) {
    cudaGetLastError();
    out[0] = '\0';
    return false;
  }
  out[n - 1] = '\0';
  return true;
}

core::Expected<std::unique_ptr<collective::Implementation>> make_nccl(int rank, int size,
                                                                      int device,
                                                                      const ShareId& share_id) {
  auto made = NcclImplementation::create(rank, size, device, share_id, HostBuffers::stage);
  if (!made) return made.error();
  return std::unique_ptr<collective::Implementation>(std::move(*made));
}

void abort_nccl(collective::Implementation& nccl) {
  static_cast<NcclImplementation&>(nccl).abort();
}

// The module carries its own, hidden copy of core: the tensors the CUDA backend makes for
// itself (cuDNN's rounded operands and transposed filters, workspaces) find their device in
// that copy's registry, so the module serves its devices there as well as to the loader.
core::DeviceProvider* devices() {
  register_cuda_devices();
  return cuda_device_provider();
}

const ModuleApi api{devices, device_count, pci_bus_id, make_nccl, abort_nccl};

}  // namespace
}  // namespace troupe::gpu

extern "C" __attribute__((visibility("default"))) const troupe::gpu::ModuleApi* troupe_gpu_module(
    uint64_t abi) {
  return abi == troupe::gpu::module_abi() ? &troupe::gpu::api : nullptr;
}
