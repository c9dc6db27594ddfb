// The worker side of the multi-process tests: serves its TF_CONFIG task with the test
// registry.
#include <iostream>

#include "actors/serve.hpp"
#include "job/job_registry.hpp"

int main() {
  auto resolver = troupe::net::TFConfigClusterResolver::from_env();
  if (!resolver) {
    std::cout << "{\"ok\":false}" << std::endl;
    return 2;
  }
  const auto registry = troupe::test::make_test_registry();
  auto st = troupe::actors::serve(*resolver, registry, {}, [&](const std::string& address) {
    std::cerr << "ready " << resolver->task().to_string() << " on " << address << std::endl;
  });
  std::cout << (st.ok() ? "{\"ok\":true}" : "{\"ok\":false}") << std::endl;
  return st.ok() ? 0 : 1;
}
