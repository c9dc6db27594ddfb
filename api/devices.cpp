#include "troupe/devices.hpp"

#include <cstdlib>

#include "net/cluster_spec.hpp"
#ifdef TROUPE_WITH_GPU
#include <mutex>

#include "gpu/module.hpp"
#endif

namespace troupe {

using core::Errc;
using core::make_error;

namespace {

#ifdef TROUPE_WITH_GPU
// Stands for the CUDA devices when libtroupe_gpu.so does not load: none, and why.
class UnloadedCuda final : public core::DeviceProvider {
 public:
  explicit UnloadedCuda(std::string why) : why_(std::move(why)) {}
  int count() override { return 0; }
  std::string describe() override { return why_; }
  core::Expected<core::Backend*> backend(int) override {
    return make_error(Errc::unavailable, why_);
  }

 private:
  std::string why_;
};
#endif

// gpu/ serves CUDA devices where it is built, from a module loaded the first time a CUDA
// device is named: a CPU-only process maps none of CUDA's libraries.
void register_devices(core::DeviceKind kind) {
#ifdef TROUPE_WITH_GPU
  if (kind != core::DeviceKind::cuda) return;
  static std::once_flag once;
  std::call_once(once, [] {
    auto module = gpu::load_module();
    core::register_device_provider(
        core::DeviceKind::cuda,
        module ? (*module)->devices() : new UnloadedCuda(module.error().message));
  });
#else
  (void)kind;
#endif
}

}  // namespace

core::Expected<int> local_rank() {
  for (const char* name :
       {"TROUPE_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "LOCAL_RANK"}) {
    const char* v = std::getenv(name);
    if (v == nullptr) continue;
    const std::string text(v);
    char* end = nullptr;
    const long r = std::strtol(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0' || r < 0 || r > 1 << 20)
      return make_error(Errc::invalid_argument,
                        std::string(name) + "='" + text.substr(0, 20) + "' is not a local rank");
    return static_cast<int>(r);
  }
  if (std::getenv("TF_CONFIG") != nullptr) {
    auto resolver = net::TFConfigClusterResolver::from_env();
    if (!resolver) return resolver.error();
    const int r = net::local_rank(resolver->cluster_spec(), resolver->task());
    if (r >= 0) return r;
  }
  return 0;
}

core::Expected<core::Device> select_device(const std::string& request) {
  auto parsed = core::parse_device(request);
  if (!parsed) return parsed.error();
  if (parsed->kind == core::DeviceKind::cpu || parsed->index >= 0) return select_device(request, 0);
  auto rank = local_rank();
  if (!rank) return rank.error();
  return select_device(request, *rank);
}

core::Expected<core::Device> select_device(const std::string& request, int rank) {
  auto parsed = core::parse_device(request);
  if (!parsed) return parsed.error();
  register_devices(parsed->kind);
  return core::select_device(*parsed, rank);
}

core::Expected<core::Precision> select_precision(const std::string& request, core::Device device) {
  register_devices(device.kind);
  auto backend = core::backend_for(device);
  if (!backend) return backend.error();
  return core::resolve_precision(request, **backend);
}

std::string device_name(core::Device device) {
  register_devices(device.kind);
  auto backend = core::backend_for(device);
  return backend ? (*backend)->name() : device.to_string();
}

}  // namespace troupe
