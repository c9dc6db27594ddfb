#include "core/cpu_features.hpp"

#include <atomic>
#include <cstdlib>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace troupe::core {

namespace {

constexpr unsigned bit(CpuFeature f) {
  return 1u << static_cast<unsigned>(f);
}

const char* const names[] = {"avx2", "avx512f", "avx512_bf16", "avx512_vnni", "f16c", "amx_bf16"};
static_assert(sizeof(names) / sizeof(names[0]) == static_cast<size_t>(CpuFeature::count_));

unsigned detect() {
  unsigned found = 0;
#if defined(__x86_64__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(1, &a, &b, &c, &d) != 0 && ((c >> 29) & 1u) != 0) found |= bit(CpuFeature::f16c);
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d) != 0) {
    if ((b >> 5) & 1u) found |= bit(CpuFeature::avx2);
    if ((b >> 16) & 1u) found |= bit(CpuFeature::avx512f);
    if ((c >> 11) & 1u) found |= bit(CpuFeature::avx512_vnni);
    if ((d >> 22) & 1u) found |= bit(CpuFeature::amx_bf16);
  }
  if (__get_cpuid_count(7, 1, &a, &b, &c, &d) != 0 && ((a >> 5) & 1u) != 0)
    found |= bit(CpuFeature::avx512_bf16);
#endif
  return found;
}

Expected<unsigned> parse_mask(const std::string& list) {
  unsigned mask = 0;
  size_t start = 0;
  while (start <= list.size()) {
    size_t end = list.find(',', start);
    if (end == std::string::npos) end = list.size();
    const std::string name = list.substr(start, end - start);
    if (!name.empty()) {
      unsigned i = 0;
      while (i < static_cast<unsigned>(CpuFeature::count_) && name != names[i])
        ++i;
      if (i == static_cast<unsigned>(CpuFeature::count_)) {
        std::string known;
        for (const char* n : names)
          known += (known.empty() ? "" : ", ") + std::string(n);
        return make_error(Errc::invalid_argument, "TROUPE_CPU_DISABLE: unknown CPU feature '" +
                                                      name + "' (known: " + known + ")");
      }
      mask |= 1u << i;
    }
    start = end + 1;
  }
  return mask;
}

struct State {
  unsigned found = detect();
  std::atomic<unsigned> masked{0};
  Status env_status;
  State() {
    if (const char* env = std::getenv("TROUPE_CPU_DISABLE")) {
      auto m = parse_mask(env);
      if (m)
        masked = *m;
      else
        env_status = m.error();
    }
  }
};

State& state() {
  static State s;
  return s;
}

}  // namespace

const char* cpu_feature_name(CpuFeature f) {
  return names[static_cast<unsigned>(f)];
}

bool cpu_has(CpuFeature f) {
  const State& s = state();
  return (s.found & ~s.masked.load(std::memory_order_relaxed) & bit(f)) != 0;
}

bool cpu_masked(CpuFeature f) {
  const State& s = state();
  return (s.found & s.masked.load(std::memory_order_relaxed) & bit(f)) != 0;
}

std::vector<std::string> cpu_feature_names() {
  std::vector<std::string> out;
  for (unsigned i = 0; i < static_cast<unsigned>(CpuFeature::count_); ++i)
    if (cpu_has(static_cast<CpuFeature>(i))) out.emplace_back(names[i]);
  return out;
}

Status set_cpu_disable(const std::string& list) {
  auto m = parse_mask(list);
  if (!m) return m.error();
  state().masked = *m;
  return {};
}

Status cpu_disable_status() {
  return state().env_status;
}

}  // namespace troupe::core
