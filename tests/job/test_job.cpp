// The worker side of the multi-process tests: serves its TF_CONFIG task with the test
// registry.
#include <iostream>
#include <string>

#include "actors/serve.hpp"
#include "job/job_registry.hpp"

int main(int argc, char** argv) {
  auto resolver = troupe::net::TFConfigClusterResolver::from_env();
  if (!resolver) {
    std::cout << "{\"ok\":false}" << std::endl;
    return 2;
  }
  const auto registry = troupe::test::make_test_registry();
  troupe::net::NodeOptions options;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--caf-tensors") {  // pulls and pushes as CAF messages, not the tensor channel
      options.tensor_channel = false;
    } else if (arg == "--dataset-timeout-ms" && i + 1 < argc) {
      options.dataset_timeout = std::chrono::milliseconds(std::stoll(argv[++i]));
    } else {
      std::cerr << "test_job: unknown argument " << arg << std::endl;
      std::cout << "{\"ok\":false}" << std::endl;
      return 2;
    }
  }
  auto st = troupe::actors::serve(*resolver, registry, options, [&](const std::string& address) {
    std::cerr << "ready " << resolver->task().to_string() << " on " << address << std::endl;
  });
  std::cout << (st.ok() ? "{\"ok\":true}" : "{\"ok\":false}") << std::endl;
  return st.ok() ? 0 : 1;
}
