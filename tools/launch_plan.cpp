#include "tools/launch_plan.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
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
  return run_dir;
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
  std::filesystem::remove(path, ec);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  const bool written = fd >= 0 && ::write(fd, secret->data(), secret->size()) ==
                                      static_cast<ssize_t>(secret->size());
  if (fd >= 0) ::close(fd);
  if (!written)
    return core::make_error(core::Errc::io_error, path + ": cannot write the cluster secret");
  ::setenv(net::cluster_secret_file_env, path.c_str(), 1);
  undo.names.push_back(net::cluster_secret_file_env);
  return true;
}

}  // namespace

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
