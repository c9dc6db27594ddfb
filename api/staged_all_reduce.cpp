#include "api/staged_all_reduce.hpp"

namespace troupe {

core::Status HostStagedAllReduce::all_reduce(const collective::AllReduceOptions& o) {
  if (o.inputs.empty()) return host_().all_reduce(o);
  const core::Device device = o.inputs.front().device;
  size_t total = 0;
  for (const auto& b : o.inputs) {
    if (b.device != device)
      return core::make_error(core::Errc::invalid_argument,
                              "all-reduce '" + o.tag + "': buffers on " + device.to_string() +
                                  " and " + b.device.to_string());
    total += b.count;
  }
  auto backend = core::backend_for(device);
  if (!backend) return backend.error();
  if (capacity_ < total * sizeof(float) || staging_device_ != device) {
    staging_.reset();
    staging_ = (*backend)->allocate_host(total * sizeof(float));
    capacity_ = total * sizeof(float);
    staging_device_ = device;
  }
  auto* host = static_cast<float*>(staging_.get());
  collective::AllReduceOptions h = o;
  h.memory = collective::Memory::host;
  h.inputs.clear();
  h.stream = nullptr;
  h.ready.reset();
  size_t at = 0;
  for (const auto& b : o.inputs) {
    // Ordered after the kernels queued before it; arrived when it returns.
    (*backend)->copy(host + at, core::Device::cpu(), b.data, device, b.count * sizeof(float));
    h.inputs.push_back({host + at, b.count, core::Device::cpu()});
    at += b.count;
  }
  if (auto st = (*backend)->synchronize(); !st) return st;
  if (auto st = host_().all_reduce(h); !st) return st;
  at = 0;
  for (const auto& b : o.inputs) {
    (*backend)->copy(b.data, device, host + at, core::Device::cpu(), b.count * sizeof(float));
    at += b.count;
  }
  return {};
}

}  // namespace troupe
