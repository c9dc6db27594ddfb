#pragma once
// A real PS cluster on 127.0.0.1 for test_cluster_process*.cpp: two PS processes and two
// worker processes (tensors through the tensor channel, or as CAF messages), the test as
// chief with a sharded variable `v` and a coordinator whose watchdog reports are kept.

#include <sys/wait.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "api/impl.hpp"
#include "cluster_fixture.hpp"
#include "job/job_registry.hpp"

namespace troupe::test {

// The workers that answer `whoami` within 10 s. A worker still finishing a cancelled
// closure counts as busy, and the coordinator sends every closure to the other meanwhile:
// a number of rounds would be a time bound that a loaded machine breaks.
inline std::set<int> workers_serving(ClusterCoordinator& c) {
  std::set<int> serving;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (serving.size() < 2 && std::chrono::steady_clock::now() < deadline) {
    auto a = c.schedule<int>("whoami");
    auto b = c.schedule<int>("whoami");
    serving.insert(a.fetch().value());
    serving.insert(b.fetch().value());
  }
  return serving;
}

struct PsCluster {
  // Children: ps:0, ps:1, worker:0, worker:1.
  explicit PsCluster(bool channel)
      : cluster(
            2, 2,
            channel ? std::vector<std::string>{} : std::vector<std::string>{"--no-tensor-channel"},
            channel ? std::vector<std::string>{} : std::vector<std::string>{"--caf-tensors"}),
        resolver(cluster.spec(), {"chief", 0}),
        strategy(ParameterServerStrategy::make(resolver,
                                               std::make_shared<core::FixedShardsPartitioner>(2))) {
    REQUIRE(strategy.ok());
    v = std::make_unique<core::Expected<Variable>>((*strategy)->create_variable(
        "v", core::Shape{4, 2}, {core::Initializer::Kind::constant, 1.0f, 0}, "sgd", 0.5f));
    REQUIRE(v->ok());
    CHECK((*v)->num_shards == 2);
    auto dup = (*strategy)->create_variable("v", core::Shape{4, 2}, {}, "sgd", 0.5f);
    CHECK_FALSE(dup.ok());
    CoordinatorOptions options;
    options.watchdog_timeout = std::chrono::milliseconds(400);
    options.on_watchdog = [this](const WatchdogReport& r) {
      std::lock_guard<std::mutex> lock(reports_mu);
      reports.push_back(r);
      report_times.push_back(std::chrono::steady_clock::now());
    };
    auto made = ClusterCoordinator::make(**strategy, options);
    REQUIRE(made.ok());
    coord = std::move(*made);
  }

  // Every task still running acknowledges and exits 0; shutdown_cluster() names those that
  // did not.
  void shut_down_and_check() {
    auto& children = cluster.children();
    std::vector<std::string> gone;
    std::vector<size_t> serving;
    for (size_t k = 0; k < children.size(); ++k) {
      if (children[k]->running())
        serving.push_back(k);
      else
        gone.push_back(k < 2 ? "ps:" + std::to_string(k) : "worker:" + std::to_string(k - 2));
    }
    const auto shutdown = coord->shutdown_cluster();
    INFO("shutdown: " << (shutdown.ok() ? std::string("ok") : shutdown.error().to_string()));
    const auto stats = coord->stats();
    INFO("workers lost " << stats.workers_lost << ", rejoined " << stats.worker_rejoins);
    if (shutdown.ok() != gone.empty()) {
      // What each task said last, to tell why one did not acknowledge (refused, lost, busy):
      // the ones the shutdown names first, as a long log may be cut short.
      std::vector<size_t> order;
      for (int named = 1; named >= 0; --named)
        for (size_t k = 0; k < children.size(); ++k) {
          const std::string name =
              k < 2 ? "ps:" + std::to_string(k) : "worker:" + std::to_string(k - 2);
          const bool in_error =
              !shutdown.ok() && shutdown.error().message.find(name) != std::string::npos;
          if (in_error == (named == 1)) order.push_back(k);
        }
      for (size_t k : order) {
        const std::string err = children[k]->captured_stderr();
        UNSCOPED_INFO("child " << k << " (0, 1: PS; 2, 3: workers), its stderr's end: "
                               << err.substr(err.size() > 1500 ? err.size() - 1500 : 0));
      }
    }
    REQUIRE(shutdown.ok() == gone.empty());
    for (const auto& name : gone)
      CHECK_THAT(shutdown.error().message, Catch::Contains(name));
    for (size_t k : serving) {
      // Bounded, not timed: a sanitized process on a loaded 2-core machine (CI, two such
      // tests at once) took over 10 s from its last line to its exit.
      auto status = children[k]->wait_exit(std::chrono::seconds(30));
      INFO("child " << k << " (0, 1: PS; 2, 3: workers): " << children[k]->captured_stderr()
                    << children[k]->captured_stdout());
      REQUIRE(status.has_value());
      CHECK((WIFEXITED(*status) && WEXITSTATUS(*status) == 0));
    }
  }

  LocalCluster cluster;
  net::SimpleClusterResolver resolver;
  core::Expected<std::unique_ptr<ParameterServerStrategy>> strategy;
  std::unique_ptr<core::Expected<Variable>> v;
  std::mutex reports_mu;  // the watchdog's reports, for the section that checks them
  std::vector<WatchdogReport> reports;
  std::vector<std::chrono::steady_clock::time_point> report_times;  // when each came
  std::unique_ptr<ClusterCoordinator> coord;
};

}  // namespace troupe::test
