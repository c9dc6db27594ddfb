#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace troupe::net {

/// The system's limits that a job of many tasks on one host runs into, and what such a job
/// needs of them. The chief and each PS task hold a link to every other task, so their
/// descriptors grow with the job; every task runs its own threads, and the host's threads
/// are bounded by the kernel (pid_max, threads-max) and per user (RLIMIT_NPROC).
///
///   auto limit = raise_descriptor_limit();         // soft -> hard, inherited by children
///   auto needs = host_needs(529, 16, 529);         // 512 workers, 16 PS, a chief here
///   for (auto& s : shortfalls(needs, read_host_limits())) std::cerr << s << "\n";

/// This process's descriptor limit before and after raise_descriptor_limit().
struct DescriptorLimit {
  uint64_t soft_before = 0;
  uint64_t soft = 0;
  uint64_t hard = 0;
};

/// Raises this process's soft RLIMIT_NOFILE to its hard limit (what an unprivileged process
/// may do; children inherit it). Idempotent; the figures it reports are the ones it saw.
DescriptorLimit raise_descriptor_limit();

/// The host's limits on threads and this process's on descriptors. A value of 0 is
/// unknown (the file could not be read); UINT64_MAX is unlimited.
struct HostLimits {
  uint64_t descriptors_soft = 0;  // RLIMIT_NOFILE of this process
  uint64_t descriptors_hard = 0;
  uint64_t nproc_soft = 0;  // RLIMIT_NPROC: threads of this user (not enforced for root)
  bool root = false;
  uint64_t pid_max = 0;          // /proc/sys/kernel/pid_max: every thread takes an id
  uint64_t threads_max = 0;      // /proc/sys/kernel/threads-max
  uint64_t threads_running = 0;  // threads on the host now (/proc/loadavg)
};
HostLimits read_host_limits();

/// What a job of `tasks_total` tasks, `ps_tasks` of them PS tasks, needs, `tasks_here` of
/// them on this host. Upper estimates from measurements on a 2-core host (docs/scaling.md,
/// docs/benchmarks.md, issue 42):
/// - descriptors: a chief or PS task keeps up to kDescriptorsPerPeer per other task (a
///   link's socket, its socket pair into CAF and the tunnel's, a worker's tensor channel)
///   plus a base (measured at 128 workers x 4 PS: the chief 801 for 132 peers, a PS task
///   534);
/// - threads: each task runs up to kThreadsPerTask of its own (CAF's scheduler and
///   multiplexer, the node's relay and request pools) and one tunnel acceptor per task it
///   dials (a worker: every PS task; the chief: every task, counted once here).
struct HostNeeds {
  uint64_t tasks_total = 0;
  uint64_t tasks_here = 0;
  uint64_t descriptors_per_process = 0;  // the chief's and each PS task's
  uint64_t threads = 0;                  // of all the tasks on this host together
};
inline constexpr uint64_t kDescriptorsPerPeer = 6;
inline constexpr uint64_t kDescriptorsBase = 64;
inline constexpr uint64_t kThreadsPerTask = 16;
HostNeeds host_needs(uint64_t tasks_total, uint64_t ps_tasks, uint64_t tasks_here);

/// One sentence per limit that falls short of `needs`, naming the limit, its value, the need
/// and how to raise it; empty when every known limit suffices.
std::vector<std::string> shortfalls(const HostNeeds& needs, const HostLimits& limits);

/// The limits, the needs and the shortfalls as one JSON object (the launcher's `host_limits`).
nlohmann::json describe(const DescriptorLimit& raised, const HostNeeds& needs,
                        const HostLimits& limits);

}  // namespace troupe::net
