#pragma once

// A real cluster on 127.0.0.1 for multi-process tests: PS tasks (troupe serve) and worker
// tasks (test_job, serving the test registry), each a child process with its own
// TF_CONFIG; the test is the chief. Every process is killed by pid when the fixture ends.

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "net/cluster_spec.hpp"
#include "process.hpp"

namespace troupe::test {

class LocalCluster {
 public:
  /// Starts `ps` PS tasks and `workers` worker tasks, with `ps_args` / `worker_args` after
  /// their binaries, and waits until each says it is ready.
  LocalCluster(int ps, int workers, std::vector<std::string> ps_args = {},
               std::vector<std::string> worker_args = {}) {
    std::map<std::string, std::vector<std::string>> jobs;
    auto addresses = loopback_addresses(ps + workers + 1);
    if (ps > 0) jobs["ps"].assign(addresses.begin(), addresses.begin() + ps);
    if (workers > 0)
      jobs["worker"].assign(addresses.begin() + ps, addresses.begin() + ps + workers);
    jobs["chief"] = {addresses.back()};
    spec_ = net::ClusterSpec(jobs);
    for (const auto& [job, n] : {std::pair<std::string, int>{"ps", ps}, {"worker", workers}})
      for (int i = 0; i < n; ++i) {
        std::vector<std::string> argv{job == "ps" ? TROUPE_BIN_DIR "/troupe"
                                                  : TROUPE_BIN_DIR "/test_job"};
        if (job == "ps") argv.push_back("serve");
        for (const auto& a : job == "ps" ? ps_args : worker_args)
          argv.push_back(a);
        commands_.push_back(
            {argv, {"TF_CONFIG=" + net::TFConfigClusterResolver::render(spec_, {job, i})}});
        children_.push_back(
            std::make_unique<ChildProcess>(commands_.back().first, commands_.back().second));
      }
    for (auto& c : children_) {
      const bool ready = c->wait_for_stderr("ready", std::chrono::seconds(10));
      INFO(c->captured_stderr());
      REQUIRE(ready);
    }
  }

  const net::ClusterSpec& spec() const { return spec_; }
  net::SimpleClusterResolver chief() const { return {spec_, {"chief", 0}}; }
  /// Children in order: ps:0.., then worker:0..
  std::unique_ptr<ChildProcess>& child(size_t k) { return children_[k]; }
  std::vector<std::unique_ptr<ChildProcess>>& children() { return children_; }
  /// Starts child k again with its command (same address).
  void restart(size_t k) {
    children_[k] = std::make_unique<ChildProcess>(commands_[k].first, commands_[k].second);
  }

 private:
  net::ClusterSpec spec_;
  std::vector<std::pair<std::vector<std::string>, std::vector<std::string>>> commands_;
  std::vector<std::unique_ptr<ChildProcess>> children_;
};

}  // namespace troupe::test
