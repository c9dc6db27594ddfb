// Closure arguments and results as they arrive in messages: msgpack bytes decoded into the
// types step functions take.
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "core/runtime/codec.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace troupe;
  const std::vector<char> bytes(reinterpret_cast<const char*>(data),
                                reinterpret_cast<const char*>(data) + size);
  (void)decode<std::tuple<int64_t, double, std::string>>(bytes);
  (void)decode<std::tuple<std::vector<float>, std::vector<int64_t>>>(bytes);
  (void)decode<std::map<std::string, std::vector<double>>>(bytes);
  (void)decode<std::vector<std::vector<std::string>>>(bytes);
  (void)decode<float>(bytes);
  return 0;
}
