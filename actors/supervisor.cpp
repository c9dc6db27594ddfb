#include "actors/supervisor.hpp"

#include <algorithm>
#include <iostream>

#include "net/wire.hpp"

namespace troupe::actors {

namespace {

using Self = caf::stateful_actor<SupervisorState>;
using Clock = std::chrono::steady_clock;
// Start children again (sent to itself, so that restarts happen one message at a time and a
// child failing at once cannot recurse).
using net::restart_atom;

bool normal_exit(const caf::error& reason) {
  return !reason || reason == caf::exit_reason::normal;
}

void stop_child(Self* self, SupervisorState::Child& c) {
  if (!c.handle) return;
  self->demonitor(c.handle);
  self->send_exit(c.handle, caf::exit_reason::user_shutdown);
  c.handle = nullptr;
}

// Gives up: stops every child and exits with an error for the parent to handle.
void escalate(Self* self, const std::string& why) {
  for (auto& c : self->state.children)
    stop_child(self, c);
  std::cerr << "troupe: " << self->state.options.name << " gives up: " << why << std::endl;
  if (self->state.options.on_restart) self->state.options.on_restart("", self->state.restarts);
  self->quit(net::to_caf(
      core::make_error(core::Errc::unavailable, self->state.options.name + " gave up: " + why)));
}

// Counts a restart against the intensity; false when that is one too many.
bool allow_restart(Self* self) {
  auto& st = self->state;
  const auto now = Clock::now();
  while (!st.recent.empty() && now - st.recent.front() > st.options.period)
    st.recent.pop_front();
  if (static_cast<int>(st.recent.size()) >= st.options.intensity) return false;
  st.recent.push_back(now);
  ++st.restarts;
  return true;
}

// Starts every child from `first` on that is not running; a start that fails is a failure
// of that child (handled like its exit).
void start_from(Self* self, size_t first);

void child_failed(Self* self, size_t i, const std::string& reason) {
  auto& st = self->state;
  const std::string who = st.children[i].spec.name;
  if (!allow_restart(self)) {
    escalate(self, "child '" + who + "' failed " + std::to_string(st.options.intensity + 1) +
                       " times within " + std::to_string(st.options.period.count()) +
                       " ms; last: " + reason);
    return;
  }
  std::cerr << "troupe: " << st.options.name << " restarts '" << who << "' (" << reason << ")"
            << std::endl;
  size_t first = i;
  switch (st.options.strategy) {
    case RestartStrategy::one_for_one:
      break;
    case RestartStrategy::one_for_all:
      first = 0;
      for (auto& c : st.children)
        stop_child(self, c);
      break;
    case RestartStrategy::rest_for_one:
      for (size_t k = i; k < st.children.size(); ++k)
        stop_child(self, st.children[k]);
      break;
  }
  self->send(self, restart_atom::value, static_cast<uint64_t>(first), who);
}

void start_from(Self* self, size_t first) {
  auto& st = self->state;
  for (size_t i = first; i < st.children.size(); ++i) {
    auto& c = st.children[i];
    if (c.handle) continue;
    auto started = c.spec.start(self->system());
    if (!started) {
      child_failed(self, i, "start failed: " + started.error().message);
      return;
    }
    c.handle = *started;
    self->monitor(c.handle);
  }
}

}  // namespace

caf::behavior supervisor(Self* self, std::vector<ChildSpec> children, SupervisorOptions options) {
  self->state.options = std::move(options);
  for (auto& spec : children)
    self->state.children.push_back({std::move(spec), nullptr});
  // An exit message (its parent stopping it, or a kill) ends its children first.
  self->set_exit_handler([=](caf::exit_msg& em) {
    for (auto& c : self->state.children)
      stop_child(self, c);
    self->quit(em.reason);
  });
  self->set_down_handler([=](caf::down_msg& dm) {
    auto& st = self->state;
    for (size_t i = 0; i < st.children.size(); ++i) {
      auto& c = st.children[i];
      if (!c.handle || c.handle.address() != dm.source) continue;
      c.handle = nullptr;
      const bool normal = normal_exit(dm.reason);
      const auto policy = c.spec.restart;
      if (policy == RestartPolicy::temporary || (policy == RestartPolicy::transient && normal)) {
        if (policy == RestartPolicy::temporary) st.children.erase(st.children.begin() + i);
        const bool any = std::any_of(st.children.begin(), st.children.end(),
                                     [](const auto& k) { return k.handle != nullptr; });
        if (st.options.exit_when_done && !any) self->quit();
        return;
      }
      std::string why = "exited";
      if (!normal)
        why = dm.reason.category() == net::error_category ? net::from_caf(dm.reason).to_string()
                                                          : self->system().render(dm.reason);
      child_failed(self, i, why);
      return;
    }
  });
  start_from(self, 0);
  return {
      [=](restart_atom, uint64_t first, const std::string& who) {
        start_from(self, static_cast<size_t>(first));
        if (self->state.options.on_restart)
          self->state.options.on_restart(who, self->state.restarts);
      },
      [=](which_atom, const std::string& name) -> caf::result<caf::actor> {
        for (const auto& c : self->state.children)
          if (c.spec.name == name && c.handle) return c.handle;
        return net::to_caf(
            core::make_error(core::Errc::not_found,
                             self->state.options.name + " has no running child '" + name + "'"));
      },
      [=](net::stats_atom) {
        int64_t running = 0;
        for (const auto& c : self->state.children)
          if (c.handle) ++running;
        return std::vector<int64_t>{self->state.restarts, running};
      },
  };
}

}  // namespace troupe::actors
