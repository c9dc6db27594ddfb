#pragma once

// The tensor channel's element types, without CAF (net/node_options.hpp names one).

#include <cstdint>
#include <string>

#include "core/device.hpp"
#include "core/expected.hpp"

namespace troupe::net {

/// How the tensor channel carries a frame's tensors: float32, or bfloat16 (half the bytes;
/// values rounded to nearest even on the way, float32 again on arrival). Variables stay
/// float32 on the PS; a reply goes in the request's type.
enum class WireDtype : uint8_t { float32 = 0, bfloat16 = 1 };
/// "float32" (or "f32"), "bf16" (or "bfloat16"); anything else is an error naming it.
core::Expected<WireDtype> parse_wire_dtype(const std::string& text);
const char* wire_dtype_name(WireDtype t);
/// The element type `t` names (what a collective's AllReduceOptions::wire takes).
inline core::DType element_type(WireDtype t) {
  return t == WireDtype::bfloat16 ? core::DType::bfloat16 : core::DType::float32;
}

}  // namespace troupe::net
