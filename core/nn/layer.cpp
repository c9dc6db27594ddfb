#include "core/nn/layer.hpp"

namespace troupe::core {

Status Layer::to(Device device, Precision precision) {
  auto backend = backend_for(device);
  if (!backend) return backend.error();
  for (auto& p : parameters()) {
    if (p.value->device() != device) *p.value = p.value->to(device);
    *p.grad = Tensor(p.value->shape(), DType::float32, device);
  }
  device_ = device;
  precision_ = precision;
  backend_ = *backend;
  return {};
}

}  // namespace troupe::core
