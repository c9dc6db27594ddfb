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
  // --caf-tensors: pulls and pushes as CAF messages instead of the tensor channel.
  options.tensor_channel = !(argc > 1 && std::string(argv[1]) == "--caf-tensors");
  auto st = troupe::actors::serve(*resolver, registry, options, [&](const std::string& address) {
    std::cerr << "ready " << resolver->task().to_string() << " on " << address << std::endl;
  });
  std::cout << (st.ok() ? "{\"ok\":true}" : "{\"ok\":false}") << std::endl;
  return st.ok() ? 0 : 1;
}
