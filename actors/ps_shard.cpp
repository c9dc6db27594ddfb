#include "actors/ps_shard.hpp"

namespace troupe::actors {

namespace {

template <class T>
caf::result<T> reply(core::Expected<T> r) {
  if (!r) return net::to_caf(r.error());
  return std::move(*r);
}

}  // namespace

caf::behavior ps_shard(caf::stateful_actor<PsShardActorState>* self) {
  return {
      [=](net::create_atom, const net::VariableDef& def) -> caf::result<caf::ok_atom> {
        if (auto st = self->state.shard.create(def); !st) return net::to_caf(st.error());
        return caf::ok_atom::value;
      },
      [=](net::pull_atom, const std::string& name) { return reply(self->state.shard.pull(name)); },
      [=](net::pull_rows_atom, const std::string& name, const std::vector<int64_t>& rows) {
        return reply(self->state.shard.pull_rows(name, rows));
      },
      [=](net::push_atom, uint64_t closure_id, const std::string& name, const net::WireTensor& g) {
        return reply(self->state.shard.push(closure_id, name, g));
      },
      [=](net::push_pull_atom, uint64_t closure_id, const std::string& name,
          const net::WireTensor& g) {
        return reply(self->state.shard.push_pull(closure_id, name, g));
      },
      [=](net::push_rows_atom, uint64_t closure_id, const std::string& name,
          const net::RowsUpdate& u) {
        return reply(self->state.shard.push_rows(closure_id, name, u));
      },
      [=](net::batch_atom, net::PsRequest& request) {
        return reply(self->state.shard.handle(request));
      },
      [=](net::channel_atom) { return self->state.channel_port; },
      [=](net::channel_atom, int32_t port) { self->state.channel_port = port; },
      [=](net::shutdown_atom) { self->quit(); },
      [=](net::stats_atom) {
        const auto& c = self->state.shard.counters();
        return std::vector<int64_t>{c.variables, c.pulls, c.updates_applied, c.updates_duplicate,
                                    c.requests_rejected};
      },
  };
}

}  // namespace troupe::actors
