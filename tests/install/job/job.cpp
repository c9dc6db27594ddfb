// A parameter-server job written against the installed headers only: every task runs this
// program, TF_CONFIG picks its role. Each closure pulls "v" and pushes a gradient of ones;
// with SGD at 0.25, N closures take every element of v from 0 to -N / 4.
#include <iostream>

#include <core/json_text.hpp>
#include <nlohmann/json.hpp>
#include <troupe/troupe.hpp>

int main() {
  troupe::Registry registry;
  registry.add_step("ones", [](troupe::StepContext& ctx) -> troupe::core::Expected<float> {
    auto v = ctx.pull({"v"});
    if (!v) return v.error();
    troupe::core::Tensor g((*v)[0].shape(), 1.0f);
    if (auto st = ctx.push({{"v", g}}); !st) return st.error();
    return (*v)[0].view().flat()(0);
  });
  auto fail = [](const troupe::core::Error& e) {
    std::cout << troupe::core::json_text(nlohmann::json{{"ok", false}, {"error", e.to_string()}})
              << std::endl;
    return troupe::exit_code_for(e);
  };
  auto resolver = troupe::net::TFConfigClusterResolver::from_env();
  if (!resolver) return fail(resolver.error());
  if (resolver->task().type != "chief") {
    auto st = troupe::serve(*resolver, registry);
    return st.ok() ? 0 : fail(st.error());
  }
  auto strategy = troupe::ParameterServerStrategy::make(*resolver);
  if (!strategy) return fail(strategy.error());
  auto v = (*strategy)->create_variable(
      "v", {4}, {troupe::core::Initializer::Kind::constant, 0.0f, 0}, "sgd", 0.25f);
  if (!v) return fail(v.error());
  auto coord = troupe::ClusterCoordinator::make(**strategy);
  if (!coord) return fail(coord.error());
  const int closures = 40;
  for (int i = 0; i < closures; ++i)
    if (auto st = (*coord)->schedule_no_result("ones", 1); !st) return fail(st.error());
  if (auto st = (*coord)->join(); !st) return fail(st.error());
  auto value = (*strategy)->read(*v);
  if (!value) return fail(value.error());
  (*coord)->shutdown_cluster();
  std::cout << troupe::core::json_text(nlohmann::json{
                   {"ok", true}, {"closures", closures}, {"v", value->view().flat()(0)}})
            << std::endl;
  return 0;
}
