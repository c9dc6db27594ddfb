#include "core/device.hpp"

#include <cctype>

namespace troupe::core {

namespace {

std::string lower(std::string s) {
  for (auto& c : s)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// What an error may quote of a value from outside: its first 40 characters.
std::string quoted(const std::string& text) {
  return "'" + text.substr(0, 40) + (text.size() > 40 ? "...'" : "'");
}

}  // namespace

std::string Device::to_string() const {
  return is_cpu() ? "cpu" : "cuda:" + std::to_string(index);
}

std::string DeviceRequest::to_string() const {
  if (kind == DeviceKind::cpu) return "cpu";
  return index < 0 ? "cuda" : "cuda:" + std::to_string(index);
}

Expected<DeviceRequest> parse_device(const std::string& text) {
  const std::string t = lower(text);
  if (t == "cpu") return DeviceRequest{DeviceKind::cpu, -1};
  if (t == "cuda" || t == "gpu") return DeviceRequest{DeviceKind::cuda, -1};
  for (const char* prefix : {"cuda:", "gpu:"}) {
    const std::string p(prefix);
    if (t.compare(0, p.size(), p) != 0) continue;
    const std::string digits = t.substr(p.size());
    if (digits.empty() || digits.size() > 4) break;
    bool all_digits = true;
    for (char c : digits)
      all_digits = all_digits && std::isdigit(static_cast<unsigned char>(c));
    if (!all_digits) break;
    return DeviceRequest{DeviceKind::cuda, std::stoi(digits)};
  }
  return make_error(Errc::invalid_argument,
                    "unknown device " + quoted(text) + " (cpu, cuda or cuda:N)");
}

size_t dtype_size(DType t) {
  switch (t) {
    case DType::float32:
    case DType::int32:
      return 4;
    case DType::bfloat16:
    case DType::float16:
      return 2;
    case DType::int64:
      return 8;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::float32:
      return "float32";
    case DType::bfloat16:
      return "bfloat16";
    case DType::float16:
      return "float16";
    case DType::int32:
      return "int32";
    case DType::int64:
      return "int64";
  }
  return "?";
}

Expected<DType> parse_dtype(const std::string& text) {
  const std::string t = lower(text);
  if (t == "float32" || t == "fp32" || t == "f32") return DType::float32;
  if (t == "bfloat16" || t == "bf16") return DType::bfloat16;
  if (t == "float16" || t == "fp16" || t == "half") return DType::float16;
  if (t == "int32") return DType::int32;
  if (t == "int64") return DType::int64;
  return make_error(Errc::invalid_argument,
                    "unknown element type " + quoted(text) + " (float32, bfloat16, float16)");
}

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::float32:
      return "float32";
    case Precision::tf32:
      return "tf32";
    case Precision::mixed_bfloat16:
      return "mixed_bfloat16";
    case Precision::mixed_float16:
      return "mixed_float16";
  }
  return "?";
}

Expected<Precision> parse_precision(const std::string& text) {
  const std::string t = lower(text);
  if (t == "float32") return Precision::float32;
  if (t == "tf32") return Precision::tf32;
  if (t == "mixed_bfloat16") return Precision::mixed_bfloat16;
  if (t == "mixed_float16") return Precision::mixed_float16;
  return make_error(Errc::invalid_argument,
                    "unknown precision " + quoted(text) +
                        " (float32, tf32, mixed_bfloat16, mixed_float16 or auto)");
}

DType compute_dtype(Precision p) {
  switch (p) {
    case Precision::mixed_bfloat16:
      return DType::bfloat16;
    case Precision::mixed_float16:
      return DType::float16;
    case Precision::float32:
    case Precision::tf32:
      return DType::float32;
  }
  return DType::float32;
}

}  // namespace troupe::core
