#include "tools/launch_plan.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>

#include "net/auth.hpp"
#include "net/ports.hpp"
#include "net/tls.hpp"

namespace troupe::tools {

namespace {

core::Expected<std::string> make_run_dir(const std::string& asked) {
  namespace fs = std::filesystem;
  std::string run_dir = asked;
  if (run_dir.empty()) {
    std::string tmpl = (fs::temp_directory_path() / "troupe-run-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr)
      return core::make_error(core::Errc::io_error, "cannot create a run directory");
    run_dir = tmpl;
  }
  std::error_code ec;
  fs::create_directories(run_dir, ec);
  if (ec) return core::make_error(core::Errc::io_error, run_dir + ": " + ec.message());
  if (auto st = guard_run_dir(run_dir, /*tighten=*/true); !st) return st.error();
  return run_dir;
}

core::Error refuse(const std::string& what) {
  return core::make_error(core::Errc::permission_denied, what);
}

std::string octal(mode_t mode) {
  char text[8];
  std::snprintf(text, sizeof text, "%04o", static_cast<unsigned>(mode & 07777));
  return text;
}

// A secret for this job, unless the caller gave one: every task's connections then refuse
// peers that do not prove it (net/auth.hpp). Readable by this user only.
core::Expected<bool> make_secret(const std::string& run_dir, EnvUndo& undo) {
  if (std::getenv(net::cluster_secret_env) != nullptr ||
      std::getenv(net::cluster_secret_file_env) != nullptr) {
    if (auto checked = net::cluster_secret_from_env(); !checked) return checked.error();
    return false;
  }
  auto secret = net::new_cluster_secret();
  if (!secret) return secret.error();
  const std::string path = run_dir + "/cluster-secret";
  std::error_code ec;
  std::filesystem::remove(path, ec);  // an earlier job's: the directory is this user's alone
  // O_EXCL|O_NOFOLLOW: a file or link put there meanwhile is refused, never written through.
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  const bool written = fd >= 0 && ::write(fd, secret->data(), secret->size()) ==
                                      static_cast<ssize_t>(secret->size());
  if (fd >= 0) ::close(fd);
  if (!written)
    return core::make_error(core::Errc::io_error, path + ": cannot write the cluster secret");
  // Checked again as the tasks will read it, before any of them starts.
  if (auto st = guard_secret_file(path); !st) return st.error();
  std::ifstream in(path, std::ios::binary);
  const std::string back((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (back != *secret) return refuse(path + ": the cluster secret changed after it was written");
  ::setenv(net::cluster_secret_file_env, path.c_str(), 1);
  undo.names.push_back(net::cluster_secret_file_env);
  return true;
}

}  // namespace

core::Status guard_run_dir(const std::string& dir, bool tighten) {
  namespace fs = std::filesystem;
  const uid_t me = ::geteuid();
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0)
    return core::make_error(core::Errc::not_found,
                            "run directory " + dir + ": " + std::strerror(errno));
  if (S_ISLNK(st.st_mode))
    return refuse("run directory " + dir +
                  " is a symbolic link: whoever can change it chooses where the job's secret is");
  if (!S_ISDIR(st.st_mode)) return refuse("run directory " + dir + " is not a directory");
  if (st.st_uid != me)
    return refuse("run directory " + dir + " is owned by uid " + std::to_string(st.st_uid) +
                  ", not this user (uid " + std::to_string(me) +
                  "): its owner could replace the job's secret");
  if ((st.st_mode & 077) != 0) {
    if (!tighten)
      return refuse("run directory " + dir + " has mode " + octal(st.st_mode) +
                    ": other users could read or replace the job's secret");
    const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    const bool made_private = fd >= 0 && ::fchmod(fd, 0700) == 0;
    if (fd >= 0) ::close(fd);
    if (!made_private)
      return refuse("run directory " + dir +
                    ": cannot make it private (mode 0700): " + std::strerror(errno));
  }
  std::error_code ec;
  const fs::path real = fs::canonical(dir, ec);
  if (ec) return refuse("run directory " + dir + ": " + ec.message());
  for (fs::path p = real.parent_path();; p = p.parent_path()) {
    struct stat up {};
    if (::stat(p.c_str(), &up) != 0) return refuse(p.string() + ": " + std::strerror(errno));
    if (up.st_uid != me && up.st_uid != 0)
      return refuse("run directory " + dir + ": its parent " + p.string() + " is owned by uid " +
                    std::to_string(up.st_uid) + ", who could put another directory in its place");
    if ((up.st_mode & 022) != 0 && (up.st_mode & S_ISVTX) == 0)
      return refuse("run directory " + dir + ": its parent " + p.string() + " has mode " +
                    octal(up.st_mode) +
                    " (writable by others, no sticky bit): they could put another directory "
                    "in its place");
    if (p == p.root_path()) break;
  }
  return {};
}

core::Status guard_secret_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0)
    return refuse(path + ": " +
                  (errno == ELOOP ? std::string("a symbolic link, not the job's secret")
                                  : std::string(std::strerror(errno))));
  struct stat st {};
  const bool ok = ::fstat(fd, &st) == 0;
  ::close(fd);
  if (!ok || !S_ISREG(st.st_mode)) return refuse(path + ": not a regular file");
  if (st.st_uid != ::geteuid())
    return refuse(path + " is owned by uid " + std::to_string(st.st_uid) +
                  ", not this user: it is not the secret this user's launch made");
  if ((st.st_mode & 077) != 0)
    return refuse(path + " has mode " + octal(st.st_mode) + ": others could read the secret");
  return {};
}

core::Expected<Plan> make_plan(const LaunchOptions& o, EnvUndo& undo) {
  if (o.workers < 0 || o.ps < 0 || (o.ps == 0 && o.workers == 0))
    return core::make_error(core::Errc::invalid_argument,
                            "a cluster needs PS tasks (with a chief) or workers");
  Plan plan;
  auto run_dir = make_run_dir(o.run_dir);
  if (!run_dir) return run_dir.error();
  plan.run_dir = *run_dir;
  auto own = make_secret(plan.run_dir, undo);
  if (!own) return own.error();
  plan.own_secret = *own;
  if (o.tls && std::getenv(net::tls_env) == nullptr) {
    ::setenv(net::tls_env, "1", 1);
    undo.names.push_back(net::tls_env);
  }
  auto tls = net::tls_from_env(/*have_secret=*/true);
  if (!tls) return tls.error();
  plan.tls = *tls;
  // Choose every port while holding them all (released as this returns, just before the
  // tasks start). With PS tasks the cluster has a chief (ParameterServerStrategy's
  // coordinator); without them it is a MultiWorkerMirroredStrategy cluster of workers
  // only, worker 0 the chief (TensorFlow's convention when no chief task is named).
  plan.lead = o.ps > 0 ? net::TaskId{"chief", 0} : net::TaskId{"worker", 0};
  std::map<std::string, int> counts{{"worker", o.workers}};
  if (o.ps > 0) {
    counts["chief"] = 1;
    counts["ps"] = o.ps;
  }
  if (o.evaluator) counts["evaluator"] = 1;
  std::map<std::string, std::vector<std::string>> jobs;
  std::vector<net::PortLease> leases;
  for (const auto& [job, n] : counts)
    for (int i = 0; i < n; ++i) {
      leases.push_back(net::PortLease::acquire());
      if (leases.back().port() == 0)
        return core::make_error(core::Errc::unavailable, "no free port on 127.0.0.1");
      jobs[job].push_back(net::host_port_text(o.host, leases.back().port()));
    }
  plan.spec = net::ClusterSpec(jobs);
  for (const auto& e : o.chaos)
    if (e.task.index >= plan.spec.num_tasks(e.task.type))
      return core::make_error(core::Errc::invalid_argument,
                              "chaos event " + e.to_string() + " names a task not in the cluster");
  return plan;
}

}  // namespace troupe::tools
