#pragma once

// Where a tensor lives and what its elements are, as small values (PyTorch's c10::Device
// and ScalarType), and the Keras precision policy a model computes in. Nothing here knows
// CUDA: core/backend.hpp says how a device is reached.
//
//   auto d = core::parse_device("cuda:1").value();   // {cuda, 1}
//   core::Device cpu;                                // cpu
//   auto p = core::parse_precision("mixed_bfloat16").value();
//   core::compute_dtype(p);                          // DType::bfloat16

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/expected.hpp"

namespace troupe::core {

enum class DeviceKind : uint8_t { cpu, cuda };

/// A place that holds tensors: the CPU, or the CUDA device of this ordinal (as this process
/// numbers them, after CUDA_VISIBLE_DEVICES).
struct Device {
  DeviceKind kind = DeviceKind::cpu;
  int index = 0;

  static constexpr Device cpu() { return {}; }
  static constexpr Device cuda(int index) { return {DeviceKind::cuda, index}; }
  bool is_cpu() const { return kind == DeviceKind::cpu; }
  bool is_cuda() const { return kind == DeviceKind::cuda; }
  /// "cpu" or "cuda:N".
  std::string to_string() const;
  friend bool operator==(const Device& a, const Device& b) {
    return a.kind == b.kind && a.index == b.index;
  }
  friend bool operator!=(const Device& a, const Device& b) { return !(a == b); }
};

/// What a user asked for with `--device`: "cpu", "cuda" (a GPU chosen by the process's
/// local rank, as Horovod's local_rank picks one) or "cuda:N". index is -1 for "cuda".
struct DeviceRequest {
  DeviceKind kind = DeviceKind::cpu;
  int index = -1;
  std::string to_string() const;
};

/// Parses a --device value; anything else is an invalid_argument error naming it.
Expected<DeviceRequest> parse_device(const std::string& text);

/// Element types. Floating types are what layers compute in; the integer ones hold labels,
/// row indices and histograms next to them on a device.
enum class DType : uint8_t { float32, bfloat16, float16, int32, int64 };

size_t dtype_size(DType t);
/// "float32", "bfloat16", "float16", "int32", "int64".
const char* dtype_name(DType t);
Expected<DType> parse_dtype(const std::string& text);
inline bool is_floating(DType t) {
  return t == DType::float32 || t == DType::bfloat16 || t == DType::float16;
}

/// Keras' mixed-precision policies, plus TF32 (float32 everywhere, matrix products on the
/// GPU's TF32 tensor cores, as TensorFlow does by default on Ampere and later):
///   float32          everything float32
///   tf32             float32 storage, GEMM operands rounded to TF32 (GPU only)
///   mixed_bfloat16   float32 variables and optimizer slots, GEMM/convolution operands in
///                    bfloat16 with float32 accumulation, losses and metrics in float32
///   mixed_float16    the same in float16, with dynamic loss scaling (core/loss_scale.hpp)
enum class Precision : uint8_t { float32, tf32, mixed_bfloat16, mixed_float16 };

const char* precision_name(Precision p);
/// A --precision value: the names above; "auto" is resolved by the caller for its device
/// (resolve_precision in core/backend.hpp). Anything else is an error naming the value.
Expected<Precision> parse_precision(const std::string& text);
/// The operand type of a policy's matrix products (float32 for float32 and tf32).
DType compute_dtype(Precision p);
/// Whether the policy needs loss scaling (float16's narrow exponent range).
inline bool needs_loss_scale(Precision p) {
  return p == Precision::mixed_float16;
}

}  // namespace troupe::core
