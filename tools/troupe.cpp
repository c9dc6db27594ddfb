// The troupe command line.
//   troupe serve      run this process's task from TF_CONFIG until told to shut down
// Its last line of output is one JSON object.
#include <unistd.h>

#include <iostream>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "actors/serve.hpp"
#include "troupe/registry.hpp"

namespace {

int finish(nlohmann::json result, int code) {
  std::cout << result.dump() << std::endl;
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Troupe: fault-tolerant distributed training"};
  app.require_subcommand(1);
  auto* serve = app.add_subcommand("serve", "serve this process's task (from TF_CONFIG)");
  int heartbeat_ms = 100, timeout_ms = 1000;
  serve->add_option("--heartbeat-ms", heartbeat_ms)->check(CLI::PositiveNumber);
  serve->add_option("--connection-timeout-ms", timeout_ms)->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  if (serve->parsed()) {
    auto resolver = troupe::net::TFConfigClusterResolver::from_env();
    if (!resolver) return finish({{"ok", false}, {"error", resolver.error().to_string()}}, 2);
    std::cerr << "troupe serve: " << resolver->task().to_string() << " on "
              << resolver->cluster_spec().address(resolver->task()) << ", pid " << ::getpid()
              << std::endl;
    troupe::net::NodeOptions options;
    options.heartbeat_interval = std::chrono::milliseconds(heartbeat_ms);
    options.connection_timeout = std::chrono::milliseconds(timeout_ms);
    // `troupe serve` runs PS tasks; workers run inside the job's own binary, which knows its
    // steps. An empty registry serves a worker that knows no steps.
    static const troupe::Registry empty;
    auto st = troupe::actors::serve(*resolver, empty, options, [&](const std::string& address) {
      std::cerr << "troupe serve: ready " << resolver->task().to_string() << " on " << address
                << std::endl;
    });
    if (!st) return finish({{"ok", false}, {"error", st.error().to_string()}}, 1);
    return finish({{"ok", true}, {"task", resolver->task().to_string()}}, 0);
  }
  return 0;
}
