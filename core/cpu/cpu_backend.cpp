#include "core/cpu/cpu_backend.hpp"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "core/cpu/gemm.hpp"
#include "core/cpu_features.hpp"
#include "core/half.hpp"
#include "core/parallel.hpp"

namespace troupe::core {

std::string CpuBackend::name() const {
  std::string features;
  for (const auto& f : cpu_feature_names())
    features += (features.empty() ? "" : ", ") + f;
  std::string products = cpu::gemm_supports(DType::float32) ? "; oneDNN" : "; Eigen";
  return "cpu (" + features + products + "; " + std::to_string(intra_op_threads()) +
         " intra-op threads)";
}

bool CpuBackend::fast(Precision p) const {
  return p == Precision::float32 ||
         (p == Precision::mixed_bfloat16 && cpu::gemm_supports(DType::bfloat16));
}

Status CpuBackend::supports(Precision p) const {
  if (p == Precision::tf32)
    return make_error(Errc::invalid_argument,
                      "precision tf32 is a GPU tensor-core mode; the CPU computes float32 "
                      "(--precision float32) or a mixed policy");
  if (p == Precision::mixed_bfloat16 && !cpu_has(CpuFeature::avx512_bf16))
    return make_error(
        Errc::invalid_argument,
        "precision mixed_bfloat16 on the CPU needs the AVX512_BF16 instruction "
        "set, which this CPU " +
            std::string(cpu_masked(CpuFeature::avx512_bf16) ? "has but TROUPE_CPU_DISABLE masks"
                                                            : "lacks") +
            "; use --precision float32, or auto to take the fastest this CPU has");
  return {};
}

DeviceMemory CpuBackend::allocate(size_t bytes) {
  const size_t rounded = (bytes + 63) / 64 * 64;
  return DeviceMemory(rounded == 0 ? nullptr : std::aligned_alloc(64, rounded), DeviceFree{this});
}

void CpuBackend::deallocate(void* p) {
  std::free(p);
}

void CpuBackend::copy(void* dst, Device dst_device, const void* src, Device src_device,
                      size_t bytes) {
  TROUPE_ASSERT(dst_device.is_cpu() && src_device.is_cpu(), "the CPU backend copies on the CPU");
  if (bytes > 0) std::memmove(dst, src, bytes);
}

void CpuBackend::fill(TensorView x, float value) {
  switch (x.dtype()) {
    case DType::float32:
      std::fill_n(x.data(), x.size(), value);
      return;
    case DType::bfloat16:
      std::fill_n(x.data_as<uint16_t>(), x.size(), float_to_bf16(value));
      return;
    case DType::float16:
      std::fill_n(x.data_as<uint16_t>(), x.size(), float_to_fp16(value));
      return;
    case DType::int32:
      std::fill_n(x.data_as<int32_t>(), x.size(), static_cast<int32_t>(value));
      return;
    case DType::int64:
      std::fill_n(x.data_as<int64_t>(), x.size(), static_cast<int64_t>(value));
      return;
  }
}

void CpuBackend::add(ConstTensorView x, TensorView y) {
  TROUPE_ASSERT(x.size() == y.size(), "add of views of different sizes");
  y.flat() += x.flat();
}

void CpuBackend::add_into(ConstTensorView a, ConstTensorView b, TensorView y) {
  TROUPE_ASSERT(a.size() == y.size() && b.size() == y.size(), "add of views of different sizes");
  y.flat() = a.flat() + b.flat();
}

void CpuBackend::scale(TensorView x, float factor) {
  x.flat() *= factor;
}

bool CpuBackend::all_finite(const std::vector<ConstTensorView>& xs) {
  for (const auto& x : xs)
    if (!x.flat().allFinite()) return false;
  return true;
}

void CpuBackend::convert(ConstTensorView src, TensorView dst) {
  TROUPE_ASSERT(src.size() == dst.size(), "convert between views of different sizes");
  const auto n = static_cast<size_t>(src.size());
  if (src.dtype() == dst.dtype()) {
    std::memmove(dst.data(), src.data(), src.bytes());
  } else if (src.dtype() == DType::float32) {
    to_half(src.data(), dst.data_as<uint16_t>(), n, dst.dtype());
  } else if (dst.dtype() == DType::float32) {
    from_half(src.data_as<uint16_t>(), dst.data(), n, src.dtype());
  } else {
    for (size_t i = 0; i < n; ++i) {
      const float f = src.dtype() == DType::bfloat16 ? bf16_to_float(src.data_as<uint16_t>()[i])
                                                     : fp16_to_float(src.data_as<uint16_t>()[i]);
      dst.data_as<uint16_t>()[i] =
          dst.dtype() == DType::bfloat16 ? float_to_bf16(f) : float_to_fp16(f);
    }
  }
}

ConstTensorView rounded_operand(ConstTensorView v, Precision p, Tensor& scratch) {
  if (p == Precision::float32) return v;
  scratch.resize(v.shape());
  std::memcpy(scratch.data(), v.data(), v.bytes());
  round_operands(scratch.data(), static_cast<size_t>(v.size()), p);
  return scratch;
}

}  // namespace troupe::core
