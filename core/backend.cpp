#include "core/backend.hpp"

#include "core/cpu_features.hpp"

#include <array>
#include <atomic>
#include <cmath>
#include <cstdio>
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

namespace {

[[noreturn]] void missing_kernel(const Backend& b, const char* kernel) {
  std::fprintf(stderr, "invariant broken: backend '%s' has no kernel %s\n", b.name().c_str(),
               kernel);
  std::abort();
}

}  // namespace

const char* kernel_name(Kernel k) {
  static constexpr const char* names[] = {
      "activation",    "elementwise", "reduce",       "copy_strided", "matmul",     "gather",
      "dense",         "conv2d",      "pool2d",       "axpby",        "multiply",   "columns",
      "reduce_middle", "row_dot",     "scale_rows",   "column_sums",  "batch_norm", "layer_norm",
      "dropout",       "fm",          "gather_index", "loss"};
  static_assert(sizeof(names) / sizeof(names[0]) == kKernelCount, "names follow Kernel");
  return names[static_cast<size_t>(k)];
}

// Every backend overrides the layer graph's kernels it says it has (has()); these are
// reached only by a backend that claimed one it lacks (a model is placed only where every
// kernel its operations call is had).
void Backend::elementwise(ElementOp, const std::vector<ConstTensorView>&, TensorView) {
  missing_kernel(*this, "elementwise");
}
void Backend::elementwise_backward(ElementOp, int, const std::vector<ConstTensorView>&,
                                   ConstTensorView, ConstTensorView, TensorView, bool) {
  missing_kernel(*this, "elementwise_backward");
}
void Backend::reduce(Reduce, ConstTensorView, TensorView) {
  missing_kernel(*this, "reduce");
}
void Backend::reduce_backward(Reduce, ConstTensorView, ConstTensorView, ConstTensorView, TensorView,
                              bool) {
  missing_kernel(*this, "reduce_backward");
}
void Backend::copy_strided(const kernels::IndexSpace<2>&, ConstTensorView, TensorView, bool) {
  missing_kernel(*this, "copy_strided");
}
void Backend::matmul(const MatmulGeometry&, ConstTensorView, ConstTensorView, TensorView,
                     Precision) {
  missing_kernel(*this, "matmul");
}
void Backend::gather(ConstTensorView, ConstTensorView, TensorView) {
  missing_kernel(*this, "gather");
}
void Backend::gather_backward(ConstTensorView, ConstTensorView, TensorView, bool) {
  missing_kernel(*this, "gather_backward");
}
void Backend::activation_forward(ActFn, ConstTensorView, TensorView) {
  missing_kernel(*this, "activation_forward");
}
void Backend::activation_backward(ActFn, ConstTensorView, ConstTensorView, ConstTensorView,
                                  TensorView) {
  missing_kernel(*this, "activation_backward");
}
void Backend::add_into(ConstTensorView a, ConstTensorView b, TensorView y) {
  core::copy(a, y);
  add(b, y);
}
void Backend::axpby(float, ConstTensorView, float, TensorView) {
  missing_kernel(*this, "axpby");
}
void Backend::multiply(ConstTensorView, ConstTensorView, TensorView, bool) {
  missing_kernel(*this, "multiply");
}
void Backend::copy_columns(ConstTensorView, TensorView, int64_t, bool) {
  missing_kernel(*this, "copy_columns");
}
void Backend::take_columns(ConstTensorView, int64_t, TensorView) {
  missing_kernel(*this, "take_columns");
}
void Backend::reduce_middle(Reduce, ConstTensorView, TensorView) {
  missing_kernel(*this, "reduce_middle");
}
void Backend::reduce_middle_backward(Reduce, ConstTensorView, ConstTensorView, ConstTensorView,
                                     TensorView) {
  missing_kernel(*this, "reduce_middle_backward");
}
void Backend::row_dot(ConstTensorView, ConstTensorView, TensorView) {
  missing_kernel(*this, "row_dot");
}
void Backend::scale_rows(ConstTensorView, ConstTensorView, TensorView, bool) {
  missing_kernel(*this, "scale_rows");
}
void Backend::column_sums(ConstTensorView, TensorView, bool) {
  missing_kernel(*this, "column_sums");
}
void Backend::moments(ConstTensorView, TensorView, TensorView) {
  missing_kernel(*this, "moments");
}
void Backend::batch_norm_forward(ConstTensorView, ConstTensorView, ConstTensorView, ConstTensorView,
                                 ConstTensorView, float, TensorView) {
  missing_kernel(*this, "batch_norm_forward");
}
void Backend::batch_norm_backward(ConstTensorView, ConstTensorView, ConstTensorView,
                                  ConstTensorView, float, bool, ConstTensorView, TensorView,
                                  TensorView, TensorView) {
  missing_kernel(*this, "batch_norm_backward");
}
void Backend::layer_norm_forward(ConstTensorView, ConstTensorView, ConstTensorView, float,
                                 TensorView, TensorView, TensorView) {
  missing_kernel(*this, "layer_norm_forward");
}
void Backend::layer_norm_backward(ConstTensorView, ConstTensorView, ConstTensorView,
                                  ConstTensorView, ConstTensorView, TensorView, TensorView,
                                  TensorView) {
  missing_kernel(*this, "layer_norm_backward");
}
void Backend::conv2d_forward(const Conv2dGeometry&, ConstTensorView, ConstTensorView,
                             ConstTensorView, TensorView, std::unique_ptr<Workspace>&, Precision) {
  missing_kernel(*this, "conv2d_forward (geometry)");
}
void Backend::conv2d_backward(const Conv2dGeometry&, ConstTensorView, ConstTensorView,
                              ConstTensorView, TensorView, TensorView, TensorView,
                              std::unique_ptr<Workspace>&, Precision) {
  missing_kernel(*this, "conv2d_backward (geometry)");
}
void Backend::pool2d_forward(PoolKind, const Pool2dGeometry&, ConstTensorView, TensorView) {
  missing_kernel(*this, "pool2d_forward");
}
void Backend::pool2d_backward(PoolKind, const Pool2dGeometry&, ConstTensorView, ConstTensorView,
                              ConstTensorView, TensorView) {
  missing_kernel(*this, "pool2d_backward");
}
void Backend::dropout_forward(ConstTensorView, TensorView, float, uint64_t) {
  missing_kernel(*this, "dropout_forward");
}
void Backend::dropout_backward(ConstTensorView, TensorView, float, uint64_t) {
  missing_kernel(*this, "dropout_backward");
}
void Backend::fm_forward(ConstTensorView, TensorView) {
  missing_kernel(*this, "fm_forward");
}
void Backend::fm_backward(ConstTensorView, ConstTensorView, TensorView) {
  missing_kernel(*this, "fm_backward");
}
void Backend::gather_index(ConstTensorView, ConstTensorView, TensorView) {
  missing_kernel(*this, "gather_index");
}
void Backend::scatter_add_index(ConstTensorView, ConstTensorView, TensorView) {
  missing_kernel(*this, "scatter_add_index");
}
double Backend::loss(LossKind, ConstTensorView, ConstTensorView, TensorView, float) {
  missing_kernel(*this, "loss");
}

float OptimizerConfig::learning_rate_at(int64_t t) const {
  if (decay_steps <= 0) return learning_rate;
  // As keras.optimizers.schedules.ExponentialDecay(step = the updates before this one).
  double p = static_cast<double>(t - 1) / static_cast<double>(decay_steps);
  if (staircase) p = std::floor(p);
  return static_cast<float>(learning_rate * std::pow(static_cast<double>(decay_rate), p));
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
