#pragma once

// What this CPU offers the kernels, asked of CPUID once (GCC and clang do not agree on
// __builtin_cpu_supports' names for the newer features), less what TROUPE_CPU_DISABLE
// names: a comma-separated list such as "avx512_bf16", to run as on a CPU without them
// (the kernels dispatch on these flags, so a masked feature's instructions are never
// issued by Troupe's own code).

#include <string>
#include <vector>

#include "core/expected.hpp"

namespace troupe::core {

enum class CpuFeature : unsigned {
  avx2 = 0,
  avx512f,
  avx512_bf16,  // bf16 dot products (vdpbf16ps) and conversions
  avx512_vnni,
  f16c,
  amx_bf16,
  count_
};

/// The feature's name as /proc/cpuinfo writes it ("avx512_bf16").
const char* cpu_feature_name(CpuFeature f);
/// Whether the CPU has `f` and it is not masked.
bool cpu_has(CpuFeature f);
/// Whether the CPU has `f` but a mask hides it.
bool cpu_masked(CpuFeature f);
/// The names of the features present and not masked, in enum order.
std::vector<std::string> cpu_feature_names();

/// Masks the features a comma-separated list names, replacing any earlier mask ("": none),
/// as TROUPE_CPU_DISABLE does at start-up. An unknown name is an error naming it, and
/// changes nothing.
Status set_cpu_disable(const std::string& list);
/// What TROUPE_CPU_DISABLE said wrong, if anything (an unknown name): reported by the
/// first choice of a precision, so a misspelt mask is never silently ignored.
Status cpu_disable_status();

}  // namespace troupe::core
