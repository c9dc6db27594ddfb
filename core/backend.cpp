#include "core/backend.hpp"

#include "core/cpu_features.hpp"

#include <array>
#include <atomic>
#include <cstdlib>

#include "core/cpu/cpu_backend.hpp"

namespace troupe::core {

namespace {

std::array<std::atomic<DeviceProvider*>, 2>& providers() {
  static std::array<std::atomic<DeviceProvider*>, 2> p{};
  return p;
}

std::string visible_devices_note() {
  const char* v = std::getenv("CUDA_VISIBLE_DEVICES");
  return v == nullptr ? std::string() : std::string(" (CUDA_VISIBLE_DEVICES=") + v + ")";
}

// A device this process lacks is a configuration error, not a transient one: restarting
// the process (troupe launch's retryable exit) would not help.
Error no_cuda(const std::string& what) {
#ifdef TROUPE_BUILT_WITH_CUDA
  return make_error(Errc::invalid_argument,
                    what + ": this program has no CUDA backend linked in (link troupe_devices)");
#else
  return make_error(Errc::invalid_argument,
                    what + ": this Troupe was built without CUDA (TROUPE_WITH_CUDA=OFF)");
#endif
}

}  // namespace

void DeviceFree::operator()(void* p) const {
  if (p == nullptr || backend == nullptr) return;
  if (host)
    backend->deallocate_host(p);
  else
    backend->deallocate(p);
}

DeviceMemory Backend::allocate_host(size_t bytes) {
  const size_t rounded = (bytes + 63) / 64 * 64;
  return DeviceMemory(std::aligned_alloc(64, rounded == 0 ? 64 : rounded), DeviceFree{this, true});
}

void Backend::deallocate_host(void* p) {
  std::free(p);
}

int OptimizerConfig::num_slots() const {
  switch (kind) {
    case Kind::sgd:
      return 0;
    case Kind::momentum:
    case Kind::adagrad:
      return 1;
    case Kind::rmsprop:
      return momentum > 0.0f ? 2 : 1;
    case Kind::adam:
    case Kind::ftrl:
      return 2;
  }
  return 0;
}

void register_device_provider(DeviceKind kind, DeviceProvider* provider) {
  providers()[static_cast<size_t>(kind)].store(provider);
}

DeviceProvider* device_provider(DeviceKind kind) {
  return providers()[static_cast<size_t>(kind)].load();
}

Backend& cpu_backend() {
  // Never destroyed: tensors in static storage may outlive any order of destruction.
  static CpuBackend* backend = new CpuBackend();
  return *backend;
}

Expected<Backend*> backend_for(Device device) {
  if (device.is_cpu()) return &cpu_backend();
  DeviceProvider* p = device_provider(device.kind);
  if (p == nullptr) return no_cuda("device " + device.to_string());
  const int n = p->count();
  if (device.index < 0 || device.index >= n)
    return make_error(Errc::invalid_argument, "device " + device.to_string() + " requested, but " +
                                                  p->describe() + visible_devices_note());
  return p->backend(device.index);
}

Expected<Device> select_device(const DeviceRequest& request, int local_rank) {
  if (request.kind == DeviceKind::cpu) return Device::cpu();
  DeviceProvider* p = device_provider(request.kind);
  if (p == nullptr) return no_cuda("device " + request.to_string());
  const int n = p->count();
  if (n == 0)
    return make_error(Errc::invalid_argument, "device " + request.to_string() + " requested, but " +
                                                  p->describe() + visible_devices_note());
  int index = request.index;
  if (index < 0) index = (local_rank < 0 ? 0 : local_rank) % n;
  const Device d = Device::cuda(index);
  auto backend = backend_for(d);
  if (!backend) return backend.error();
  return d;
}

Expected<Precision> resolve_precision(const std::string& text, const Backend& backend) {
  if (auto st = cpu_disable_status(); !st) return st.error();
  if (text == "auto" || text == "AUTO")
    return backend.fast(Precision::mixed_bfloat16) ? Precision::mixed_bfloat16 : Precision::float32;
  auto p = parse_precision(text);
  if (!p) return p;
  if (auto st = backend.supports(*p); !st) return st.error();
  return p;
}

}  // namespace troupe::core
