// A ClusterCoordinator ends with everything it started: made, used and destroyed many times
// in one process (as a notebook or a hyper-parameter search does), it leaves the process's
// threads and memory where they were.
#include <catch2/catch.hpp>

#include <dirent.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>

#include "api/impl.hpp"
#include "cluster_fixture.hpp"
#include "helpers.hpp"

using namespace troupe;
using namespace std::chrono_literals;

// Under AddressSanitizer freed memory waits in its quarantine (256 MiB) instead of going
// back: RSS grows whatever the code does. LeakSanitizer checks that run for what is kept.
#if defined(__SANITIZE_ADDRESS__)
#define TROUPE_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TROUPE_TEST_ASAN 1
#endif
#endif

namespace {

int threads_now() {
  int n = 0;
  if (DIR* d = ::opendir("/proc/self/task")) {
    while (const dirent* e = ::readdir(d))
      n += e->d_name[0] != '.';
    ::closedir(d);
  }
  return n;
}

int64_t rss_bytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * ::sysconf(_SC_PAGESIZE);
}

// Threads end a moment after the objects that own them: wait for the count, bounded.
int threads_settled_at_most(int want, std::chrono::milliseconds bound) {
  const auto until = std::chrono::steady_clock::now() + bound;
  int n = threads_now();
  while (n > want && std::chrono::steady_clock::now() < until) {
    std::this_thread::yield();
    n = threads_now();
  }
  return n;
}

}  // namespace

TEST_CASE(
    "A ClusterCoordinator made and destroyed 100 times leaves threads and memory as they were",
    "[process][cluster]") {
  // With the job's secret every link to a worker goes through a tunnel, which costs
  // threads; without it CAF dials the worker directly.
  const bool secret = GENERATE(false, true);
  CAPTURE(secret);
  test::Env env("TROUPE_CLUSTER_SECRET", secret ? "lifecycle-test-secret-0123456789" : nullptr);
  test::LocalCluster cluster(2, 2);
  net::SimpleClusterResolver resolver(cluster.spec(), {"chief", 0});
  auto made = ParameterServerStrategy::make(resolver);
  REQUIRE(made.ok());
  auto& strategy = **made;
  auto use = [&](ClusterCoordinator& c) {
    auto r = c.schedule<int>("add", 1, 2);
    REQUIRE(c.join().ok());
    REQUIRE(r.fetch().value() == 3);
  };
  const int threads_before = threads_settled_at_most(0, 0ms);
  const int64_t rss_before = rss_bytes();
  int threads_after_first = 0;
  for (int i = 0; i < 100; ++i) {
    auto c = ClusterCoordinator::make(strategy);
    REQUIRE(c.ok());
    use(**c);
    c->reset();
    if (i == 0) threads_after_first = threads_settled_at_most(threads_before, 5000ms);
  }
  const int threads_after = threads_settled_at_most(threads_before, 5000ms);
  const int64_t grown = rss_bytes() - rss_before;
  INFO("threads " << threads_before << " -> " << threads_after_first << " after the first, "
                  << threads_after << " after 100; RSS +" << grown / 1024 << " KiB");
  CHECK(threads_after_first <= threads_before);
  CHECK(threads_after <= threads_before);
#ifndef TROUPE_TEST_ASAN
  CHECK(grown < 8 * 1024 * 1024);
#endif
  // The cluster still serves a coordinator made after all that.
  auto last = ClusterCoordinator::make(strategy);
  REQUIRE(last.ok());
  use(**last);
  REQUIRE((*last)->shutdown_cluster().ok());
  for (auto& child : cluster.children()) {
    const auto status = child->wait_exit(10s);
    REQUIRE(status.has_value());
    CHECK((WIFEXITED(*status) && WEXITSTATUS(*status) == 0));
  }
}
