#include <algorithm>
#include <map>
#include <mutex>

#include "actors/task_link.hpp"
#include "api/impl.hpp"
#include "net/ask.hpp"
#include "net/gate.hpp"

namespace troupe {

using core::Errc;
using core::make_error;

namespace {

// The worker addresses that live coordinators of this process use. The last one to go
// closes the tunnels to a worker (with a cluster secret each costs an accepting thread and
// one per connection), so that a process making and dropping coordinators keeps none of
// their threads; the strategy's own links to the PS tasks stay.
struct WorkerHolds {
  std::mutex mu;
  std::map<std::string, int> count;
};

WorkerHolds& worker_holds() {
  static auto* holds = new WorkerHolds;  // never destroyed: coordinators may outlive statics
  return *holds;
}

void hold_workers(const std::vector<std::string>& addresses) {
  auto& h = worker_holds();
  std::lock_guard<std::mutex> lock(h.mu);
  for (const auto& a : addresses)
    ++h.count[a];
}

void release_workers(const std::vector<std::string>& addresses) {
  std::vector<std::string> unused;
  {
    auto& h = worker_holds();
    std::lock_guard<std::mutex> lock(h.mu);
    for (const auto& a : addresses)
      if (auto it = h.count.find(a); it != h.count.end() && --it->second == 0) {
        h.count.erase(it);
        unused.push_back(a);
      }
  }
  for (const auto& a : unused)
    if (auto hp = net::parse_host_port(a)) net::close_tunnels_to(hp->host, hp->port);
}

}  // namespace

ClusterCoordinator::ClusterCoordinator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

ClusterCoordinator::~ClusterCoordinator() {
  if (!impl_) return;
  if (impl_->coordinator) {
    // Wait until it (and its linked proxies) ended: none of them reaches a worker after.
    caf::scoped_actor self{*impl_->strategy.impl().sys};
    self->send_exit(impl_->coordinator, caf::exit_reason::user_shutdown);
    self->wait_for(impl_->coordinator);
  }
  impl_->book->abandon(make_error(Errc::cancelled, "the ClusterCoordinator was destroyed"));
  release_workers(impl_->worker_addresses);
}

core::Expected<std::unique_ptr<ClusterCoordinator>> ClusterCoordinator::make(
    ParameterServerStrategy& strategy, Options options) {
  auto& s = strategy.impl();
  auto impl = std::unique_ptr<Impl>(new Impl{
      strategy,
      options,
      std::make_shared<actors::ClosureBook>(options.incarnation, options.max_pending_closures),
      {},
      {}});
  for (int i = 0; i < s.spec.num_tasks("worker"); ++i)
    impl->worker_addresses.push_back(s.spec.address({"worker", i}));
  // Held from here: a make() that fails lets go of what it connected, as a destructor does.
  hold_workers(impl->worker_addresses);
  struct Release {
    const std::vector<std::string>* addresses;
    ~Release() {
      if (addresses) release_workers(*addresses);
    }
  } release{&impl->worker_addresses};
  std::vector<actors::Endpoint> workers, ps;
  for (int i = 0; i < s.spec.num_tasks("worker"); ++i) {
    const net::TaskId task{"worker", i};
    const std::string& address = impl->worker_addresses[static_cast<size_t>(i)];
    auto a = net::connect_with_retry(*s.sys, address, task.to_string(), s.options.connect_timeout);
    if (!a) return a.error();
    auto hp = net::parse_host_port(address);
    if (!hp) return hp.error();
    workers.push_back({*a, hp->host, hp->port, task.to_string()});
  }
  for (size_t i = 0; i < s.ps.size(); ++i) {
    auto hp = net::parse_host_port(s.spec.address({"ps", static_cast<int>(i)}));
    if (!hp) return hp.error();
    ps.push_back({s.ps[i], hp->host, hp->port, "ps:" + std::to_string(i)});
  }
  impl->coordinator = actors::spawn_coordinator(*s.sys, std::move(workers), std::move(ps),
                                                s.placements, impl->book, options, s.routing);
  release.addresses = nullptr;  // the coordinator's destructor lets go now
  return std::unique_ptr<ClusterCoordinator>(new ClusterCoordinator(std::move(impl)));
}

core::Status ClusterCoordinator::enqueue(const std::string& step, std::vector<char> args,
                                         std::shared_ptr<detail::RemoteState> state,
                                         uint32_t repeat) {
  if (!state) state = std::make_shared<detail::RemoteState>();
  auto id = impl_->book->add(state);
  if (!id) {
    state->settle(detail::RemoteState::Status::failed, {}, id.error());
    return id.error();
  }
  net::ClosureMsg c;
  c.id = *id;
  c.step = step;
  c.args = std::move(args);
  c.repeat = repeat;
  caf::anon_send(impl_->coordinator, net::run_atom::value, std::move(c));
  return {};
}

core::Status ClusterCoordinator::join() {
  return impl_->book->join();
}
bool ClusterCoordinator::done() {
  return impl_->book->done();
}
bool ClusterCoordinator::wait_done(std::chrono::milliseconds timeout) {
  return impl_->book->wait_done(timeout);
}

ClusterCoordinator::Stats ClusterCoordinator::stats() {
  auto c = impl_->book->counters();
  return c;
}

uint32_t ClusterCoordinator::incarnation() const {
  return impl_->book->incarnation();
}

bool ClusterCoordinator::wait_for_stats(const std::function<bool(const Stats&)>& pred,
                                        std::chrono::milliseconds timeout) {
  return impl_->book->wait_for(pred, timeout);
}

core::Expected<PerWorkerDataset> ClusterCoordinator::create_per_worker_dataset(
    const std::string& name, const std::vector<char>& args) const {
  if (name.find(dataset_args_separator) != std::string::npos)
    return core::make_error(core::Errc::invalid_argument,
                            "a dataset name may not hold the character 0x1f");
  const std::string request = dataset_request(name, args);
  // As in TensorFlow, each worker builds its iterator now, not inside the first step. The
  // coordinator records the dataset (a worker that rejoins later rebuilds it), has every
  // worker build it, and answers once each has or was lost meanwhile (that one builds it
  // when it rejoins). A worker's own error (no such dataset function) fails the call.
  // The coordinator bounds each worker's build by closure_timeout (past it that worker is
  // lost and skipped); this call's own bound leaves it a request's time more to answer.
  auto& s = impl_->strategy.impl();
  const core::Status asked = net::ask(
      **s.self, impl_->coordinator,
      {impl_->options.closure_timeout + s.options.request_timeout,
       "dataset '" + name + "': the workers' builds"},
      [](caf::ok_atom) {}, net::dataset_atom::value, request);
  if (!asked.ok()) {
    // Failed here on this call's bound (the coordinator forgets one that failed there): a
    // worker that rejoins must not build it either.
    caf::anon_send(impl_->coordinator, net::forget_atom::value, request);
    return asked.error();
  }
  return PerWorkerDataset{name};
}

core::Status ClusterCoordinator::shutdown_cluster() {
  // The coordinator knows the current connections (rejoined workers', restored PS tasks').
  auto& s = impl_->strategy.impl();
  core::Status result;
  // The coordinator answers within its own bound for the slowest task (shutdown_bound).
  const auto bound = std::max<std::chrono::milliseconds>(
      s.options.request_timeout, actors::shutdown_bound + std::chrono::seconds(5));
  (*s.self)
      ->request(impl_->coordinator, bound, net::shutdown_atom::value)
      .receive(
          [&](std::vector<std::string>& silent) {
            if (silent.empty()) return;
            std::string names;
            for (const auto& n : silent)
              names += (names.empty() ? "" : ", ") + n;
            result =
                core::make_error(core::Errc::unavailable,
                                 "shutdown not acknowledged by " + names +
                                     "; stopped, lost or unreachable, they may still be serving");
          },
          [&](caf::error& e) { result = net::from_caf(e); });
  return result;
}

}  // namespace troupe
