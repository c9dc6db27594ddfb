#include "troupe/devices.hpp"

#include <cstdlib>

#include "net/cluster_spec.hpp"
#ifdef TROUPE_WITH_GPU
#include "gpu/cuda_devices.hpp"
#endif

namespace troupe {

using core::Errc;
using core::make_error;

namespace {

// gpu/ serves CUDA devices where it is built; registered before the first choice.
void register_devices() {
#ifdef TROUPE_WITH_GPU
  gpu::register_cuda_devices();
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
  register_devices();
  auto parsed = core::parse_device(request);
  if (!parsed) return parsed.error();
  return core::select_device(*parsed, rank);
}

core::Expected<core::Precision> select_precision(const std::string& request, core::Device device) {
  register_devices();
  auto backend = core::backend_for(device);
  if (!backend) return backend.error();
  return core::resolve_precision(request, **backend);
}

std::string device_name(core::Device device) {
  register_devices();
  auto backend = core::backend_for(device);
  return backend ? (*backend)->name() : device.to_string();
}

}  // namespace troupe
