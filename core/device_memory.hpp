#pragma once

// Memory on a device, owned: freed by the backend that gave it (core/backend.hpp), back to
// that backend's pool.

#include <memory>

namespace troupe::core {

class Backend;

struct DeviceFree {
  Backend* backend = nullptr;
  bool host = false;  // host memory of Backend::allocate_host
  void operator()(void* p) const;
};

using DeviceMemory = std::unique_ptr<void, DeviceFree>;

}  // namespace troupe::core
