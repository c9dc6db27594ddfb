#include "gpu/cuda_devices.hpp"

#include <memory>
#include <mutex>
#include <vector>

#include "gpu/cuda.hpp"
#include "gpu/cuda_backend.hpp"

namespace troupe::gpu {

namespace {

class CudaDevices final : public core::DeviceProvider {
 public:
  int count() override {
    std::call_once(counted_, [&] {
      int n = 0;
      const cudaError_t e = cudaGetDeviceCount(&n);
      if (e != cudaSuccess) {
        why_none_ = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(e);
        cudaGetLastError();
        n = 0;
      }
      count_ = n;
      backends_.resize(static_cast<size_t>(n));
    });
    return count_;
  }

  std::string describe() override {
    const int n = count();
    if (n == 0)
      return "this process sees no CUDA device" + (why_none_.empty() ? "" : " (" + why_none_ + ")");
    std::string s = std::to_string(n) + " CUDA device" + (n == 1 ? "" : "s") + ":";
    for (int i = 0; i < n; ++i) {
      cudaDeviceProp prop{};
      const bool ok = cudaGetDeviceProperties(&prop, i) == cudaSuccess;
      s += std::string(i == 0 ? " " : ", ") + "cuda:" + std::to_string(i) + " " +
           (ok ? prop.name : "(properties unavailable)");
    }
    return s;
  }

  core::Expected<core::Backend*> backend(int index) override {
    if (index < 0 || index >= count())
      return core::make_error(core::Errc::unavailable,
                              "cuda:" + std::to_string(index) + ": " + describe());
    std::lock_guard<std::mutex> lock(mu_);
    auto& b = backends_[static_cast<size_t>(index)];
    if (!b) {
      auto made = CudaBackend::create(index);
      if (!made) return made.error();
      b = std::move(*made);
    }
    return static_cast<core::Backend*>(b.get());
  }

 private:
  std::once_flag counted_;
  int count_ = 0;
  std::string why_none_;
  std::mutex mu_;
  std::vector<std::unique_ptr<CudaBackend>> backends_;
};

}  // namespace

core::DeviceProvider* cuda_device_provider() {
  // Never destroyed: tensors in static storage may outlive any order of destruction, and
  // CUDA's own teardown at exit must not race ours.
  static CudaDevices* devices = new CudaDevices();
  return devices;
}

void register_cuda_devices() {
  core::register_device_provider(core::DeviceKind::cuda, cuda_device_provider());
}

}  // namespace troupe::gpu
