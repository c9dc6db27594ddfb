// TF_CONFIG as a process finds it in its environment, and the addresses in it.
#include <string>

#include "net/cluster_spec.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace troupe;
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto r = net::TFConfigClusterResolver::parse(text);
  if (r) {
    const auto& spec = r->cluster_spec();
    for (const auto& [job, addresses] : spec.jobs())
      for (int i = 0; i < spec.num_tasks(job); ++i)
        (void)net::parse_host_port(spec.address({job, i}));
  }
  (void)net::parse_host_port(text);
  return 0;
}
