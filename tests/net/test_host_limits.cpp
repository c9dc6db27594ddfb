// What a job needs of its host's limits, and the sentences that name a limit too low.
#include <catch2/catch.hpp>

#include <limits>

#include "net/host_limits.hpp"

using namespace troupe::net;

namespace {

bool names(const std::vector<std::string>& lines, const std::string& what) {
  for (const auto& l : lines)
    if (l.find(what) != std::string::npos) return true;
  return false;
}

HostLimits ample() {
  HostLimits h;
  h.descriptors_soft = h.descriptors_hard = 1 << 20;
  h.nproc_soft = 1 << 20;
  h.pid_max = 4194304;
  h.threads_max = 1 << 20;
  h.threads_running = 600;
  return h;
}

}  // namespace

TEST_CASE("A job's needs grow with its tasks and a limit short of them is named", "[host_limits]") {
  const auto needs = host_needs(529, 16, 529);  // 512 workers, 16 PS, the chief, one host
  CHECK(needs.descriptors_per_process == kDescriptorsBase + kDescriptorsPerPeer * 529);
  // Each task's own threads and a tunnel acceptor per PS task; the chief's one per task.
  CHECK(needs.threads == (kThreadsPerTask + 16) * 529 + 529);
  CHECK(host_needs(529, 16, 33).threads == (kThreadsPerTask + 16) * 33 + 529);

  CHECK(shortfalls(needs, ample()).empty());

  auto low = ample();
  low.descriptors_hard = 1024;
  auto s = shortfalls(needs, low);
  REQUIRE(s.size() == 1);
  CHECK(names(s, "RLIMIT_NOFILE) is 1024"));
  CHECK(names(s, std::to_string(needs.descriptors_per_process)));

  low = ample();
  low.pid_max = 16000;  // 529 * 32 + 529 threads beside the 600 running do not fit
  s = shortfalls(needs, low);
  REQUIRE(s.size() == 1);
  CHECK(names(s, "kernel.pid_max is 16000"));

  low = ample();
  low.nproc_soft = 4096;
  CHECK(names(shortfalls(needs, low), "RLIMIT_NPROC is 4096"));
  low.root = true;  // the kernel does not hold root to RLIMIT_NPROC
  CHECK(shortfalls(needs, low).empty());

  HostLimits unknown;  // nothing could be read: nothing is claimed
  CHECK(shortfalls(needs, unknown).empty());
}

TEST_CASE("The descriptor limit is raised to the hard one and reported", "[host_limits]") {
  const auto raised = raise_descriptor_limit();
  const auto now = read_host_limits();
  CHECK(raised.soft == raised.hard);
  CHECK(now.descriptors_soft == raised.hard);
  CHECK(raised.soft_before <= raised.soft);
  const auto j = describe(raised, host_needs(3, 1, 3), now);
  CHECK(j["descriptors"]["needed_per_process"] == kDescriptorsBase + 3 * kDescriptorsPerPeer);
  CHECK(j["shortfalls"].is_array());
}
