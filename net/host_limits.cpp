#include "net/host_limits.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <limits>
#include <mutex>

namespace troupe::net {

namespace {

constexpr uint64_t unlimited = std::numeric_limits<uint64_t>::max();

uint64_t from_rlim(rlim_t v) {
  return v == RLIM_INFINITY ? unlimited : static_cast<uint64_t>(v);
}

// The first number in `path`, or 0 when it cannot be read.
uint64_t read_number(const char* path) {
  std::ifstream in(path);
  uint64_t v = 0;
  return in >> v ? v : 0;
}

std::string limit_text(uint64_t v) {
  return v == unlimited ? "unlimited" : std::to_string(v);
}

}  // namespace

DescriptorLimit raise_descriptor_limit() {
  static std::mutex m;
  static DescriptorLimit seen;
  static bool done = false;
  std::lock_guard lock(m);
  if (done) return seen;
  rlimit l{};
  if (::getrlimit(RLIMIT_NOFILE, &l) != 0) return seen;
  seen.soft_before = from_rlim(l.rlim_cur);
  seen.hard = from_rlim(l.rlim_max);
  if (l.rlim_cur != l.rlim_max) {
    rlimit raised = l;
    raised.rlim_cur = l.rlim_max;
    // Some kernels refuse RLIM_INFINITY for descriptors (above fs.nr_open): keep the old.
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) l = raised;
  }
  seen.soft = from_rlim(l.rlim_cur);
  done = true;
  return seen;
}

HostLimits read_host_limits() {
  HostLimits h;
  rlimit l{};
  if (::getrlimit(RLIMIT_NOFILE, &l) == 0) {
    h.descriptors_soft = from_rlim(l.rlim_cur);
    h.descriptors_hard = from_rlim(l.rlim_max);
  }
  if (::getrlimit(RLIMIT_NPROC, &l) == 0) h.nproc_soft = from_rlim(l.rlim_cur);
  h.root = ::geteuid() == 0;
  h.pid_max = read_number("/proc/sys/kernel/pid_max");
  h.threads_max = read_number("/proc/sys/kernel/threads-max");
  // /proc/loadavg: "0.50 0.40 0.30 2/616 1234": the fourth field is running/total threads.
  std::ifstream in("/proc/loadavg");
  std::string a, b, c, threads;
  if (in >> a >> b >> c >> threads)
    if (auto slash = threads.find('/'); slash != std::string::npos)
      h.threads_running = std::strtoull(threads.c_str() + slash + 1, nullptr, 10);
  return h;
}

HostNeeds host_needs(uint64_t tasks_total, uint64_t ps_tasks, uint64_t tasks_here) {
  HostNeeds n;
  n.tasks_total = tasks_total;
  n.tasks_here = tasks_here;
  n.descriptors_per_process = kDescriptorsBase + kDescriptorsPerPeer * tasks_total;
  n.threads = (kThreadsPerTask + ps_tasks) * tasks_here + tasks_total;
  return n;
}

std::vector<std::string> shortfalls(const HostNeeds& needs, const HostLimits& limits) {
  std::vector<std::string> out;
  const auto job = std::to_string(needs.tasks_total) + " tasks";
  if (limits.descriptors_hard != 0 && limits.descriptors_hard < needs.descriptors_per_process)
    out.push_back("descriptors: a chief or PS task of " + job + " keeps up to " +
                  std::to_string(needs.descriptors_per_process) +
                  " open; the hard limit (RLIMIT_NOFILE) is " +
                  limit_text(limits.descriptors_hard) +
                  ": raise it (`ulimit -Hn`, LimitNOFILE= in a systemd unit, nofile in "
                  "/etc/security/limits.conf)");
  const auto here = std::to_string(needs.tasks_here) + " tasks on this host";
  const uint64_t wanted = needs.threads + limits.threads_running;
  if (limits.pid_max != 0 && limits.pid_max < wanted)
    out.push_back("threads: " + here + " run up to " + std::to_string(needs.threads) +
                  " threads beside the host's " + std::to_string(limits.threads_running) +
                  ", and each takes a process id; kernel.pid_max is " +
                  std::to_string(limits.pid_max) +
                  ": raise it (sysctl -w kernel.pid_max=4194304) or run fewer tasks per host");
  if (limits.threads_max != 0 && limits.threads_max < wanted)
    out.push_back("threads: " + here + " run up to " + std::to_string(needs.threads) +
                  " threads; kernel.threads-max is " + std::to_string(limits.threads_max) +
                  ": raise it (sysctl -w kernel.threads-max=N) or run fewer tasks per host");
  if (!limits.root && limits.nproc_soft != 0 && limits.nproc_soft < wanted)
    out.push_back("threads: " + here + " run up to " + std::to_string(needs.threads) +
                  " threads; this user's RLIMIT_NPROC is " + limit_text(limits.nproc_soft) +
                  ": raise it (`ulimit -u`, nproc in /etc/security/limits.conf)");
  return out;
}

nlohmann::json describe(const DescriptorLimit& raised, const HostNeeds& needs,
                        const HostLimits& limits) {
  const auto num = [](uint64_t v) -> nlohmann::json {
    if (v == unlimited) return "unlimited";
    return v;
  };
  return {{"descriptors",
           {{"soft_before", num(raised.soft_before)},
            {"soft", num(limits.descriptors_soft)},
            {"hard", num(limits.descriptors_hard)},
            {"needed_per_process", needs.descriptors_per_process}}},
          {"threads",
           {{"needed", needs.threads},
            {"running", limits.threads_running},
            {"pid_max", limits.pid_max},
            {"threads_max", limits.threads_max},
            {"nproc", limits.root ? nlohmann::json("root") : num(limits.nproc_soft)}}},
          {"shortfalls", shortfalls(needs, limits)}};
}

}  // namespace troupe::net
