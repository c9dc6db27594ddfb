#include "actors/channel_server.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <shared_mutex>
#include <string>

#include "net/ask.hpp"
#include "net/auth.hpp"

namespace troupe::actors {

core::Expected<std::unique_ptr<ChannelServer>> ChannelServer::start(
    caf::actor_system& sys, caf::actor shard, const std::string& host, ChannelServerOptions options,
    std::shared_ptr<SharedShard> shared) {
  uint16_t port = 0;
  auto listener = net::listen_on(host, port);
  if (!listener) return listener.error();
  const size_t max_connections = options.max_connections;
  std::unique_ptr<ChannelServer> server(
      new ChannelServer(sys, std::move(shard), std::move(options), std::move(shared)));
  auto* s = server.get();
  net::DoorOptions door;  // with the job's secret, proven before a member costs a thread
  door.secret = s->options_.secret;
  door.tls = net::links_encrypted();
  door.identity = s->options_.identity;
  door.max_unproven = s->options_.max_unproven;
  // Served request by request: hundreds of workers' connections cost a few threads, not
  // one each; a request that finds every thread busy (a slow peer's) gets a new one soon.
  net::RequestPool::Options pool;
  pool.threads = s->options_.threads;
  pool.max_threads = std::max(s->options_.threads, max_connections);
  pool.idle_timeout = s->options_.idle_timeout;
  pool.farewell = [s](net::Socket& socket, const std::string& peer) {  // as recv_request says it
    const core::Error idle = core::make_error(
        core::Errc::unavailable,
        "connection idle for " + std::to_string(s->options_.idle_timeout.count()) + " ms");
    std::fprintf(stderr, "troupe: tensor channel: ended the connection of %s: %s\n", peer.c_str(),
                 idle.to_string().c_str());
    (void)net::send_reply(socket, idle);
  };
  auto serve_one = [s](net::Socket& socket, const std::string& peer) {
    return s->serve_one(socket, peer);
  };
  auto refuse = [s](const std::string& peer, const std::string& why) { s->refuse(peer, why); };
  auto started =
      s->options_.pooled.value_or(s->options_.expected_members >= ChannelServerOptions::pooled_from)
          ? net::ConnectionServer::start_pooled(std::move(*listener), port, serve_one, refuse,
                                                max_connections, std::move(door), pool)
          : net::ConnectionServer::start(
                std::move(*listener), port,
                [serve_one](net::Socket& socket, const std::string& peer) {
                  while (serve_one(socket, peer)) {
                  }
                },
                refuse, max_connections, std::move(door));
  if (!started) return started.error();
  server->server_ = std::move(*started);
  return server;
}

core::Expected<ChannelServerOptions> ChannelServerOptions::from_env(std::string secret) {
  ChannelServerOptions o;
  o.secret = std::move(secret);
  for (const char* env : {channel_direct_env, channel_pooled_env}) {
    const char* v = std::getenv(env);
    if (v == nullptr) continue;
    if (std::string(v) != "0" && std::string(v) != "1")
      return core::make_error(core::Errc::invalid_argument,
                              std::string(env) + "='" + v + "' is neither 0 nor 1");
    if (env == channel_direct_env)
      o.direct = std::string(v) == "1";
    else
      o.pooled = std::string(v) == "1";
  }
  const char* mb = std::getenv(channel_memory_env);
  if (mb == nullptr) return o;
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(mb, &end, 10);
  if (*mb < '0' || *mb > '9' || *end != '\0' || errno != 0 || v == 0 || v > (uint64_t{1} << 24))
    return core::make_error(core::Errc::invalid_argument,
                            std::string(channel_memory_env) + "='" + mb +
                                "' is not a number of MiB between 1 and 16777216");
  o.memory_budget = static_cast<uint64_t>(v) << 20;
  return o;
}

core::Expected<std::vector<net::PsItem>> ChannelServer::read(const net::PsRequest& request) {
  if (request.wire == net::WireDtype::bfloat16)
    shared_->bf16_requests.fetch_add(1, std::memory_order_relaxed);
  if (auto st = shared_->leased(); !st) return st.error();
  if (auto fresh = shared_->admit(request.epoch); !fresh) return fresh.error();
  core::Expected<std::vector<net::PsItem>> items = std::vector<net::PsItem>{};
  {
    std::shared_lock<WriterFirstLock> lock(shared_->lock);
    items = shared_->state.read(request);
  }
  if (items) {
    shared_->pulls.fetch_add(static_cast<int64_t>(request.items.size()), std::memory_order_relaxed);
    net::PsLoad load;
    net::add_load_out(*items, load);
    shared_->rows_pulled.fetch_add(load.rows_out, std::memory_order_relaxed);
    shared_->bytes_pulled.fetch_add(load.bytes_out, std::memory_order_relaxed);
  } else
    shared_->rejected.fetch_add(1, std::memory_order_relaxed);
  return items;
}

core::Expected<std::vector<net::PsItem>> ChannelServer::update(net::PsRequest& request) {
  if (request.wire == net::WireDtype::bfloat16)
    shared_->bf16_requests.fetch_add(1, std::memory_order_relaxed);
  // Exclusively, as the actor changes the shards: one update at a time, its applied tag
  // checked and recorded with it, never inside a snapshot's copy of a shard.
  std::unique_lock<WriterFirstLock> lock(shared_->lock);
  // Under the lock, as the actor checks it (see ps_shard.cpp's shard copy).
  if (auto st = shared_->leased(); !st) return st.error();
  if (auto fresh = shared_->admit(request.epoch); !fresh) return fresh.error();
  return shared_->state.handle(request);
}

void ChannelServer::refuse(const std::string& peer, const std::string& why) {
  log_.say("troupe: tensor channel: refused " + peer + ": " + why);
  caf::anon_send(shard_, net::refused_atom::value, false);
}

bool ChannelServer::serve_one(net::Socket& socket, const std::string& peer) {
  // With a secret, a member: the door (net::ConnectionServer) has had its proof. Its
  // socket is readable: the request has begun (or the peer hung up).
  net::set_io_timeout(socket, options_.stall_timeout);
  net::ChannelLimits limits;
  limits.idle_timeout = options_.idle_timeout;
  limits.budget = &budget_;
  net::ByteBudget::Lease lease;  // the request's memory, until its reply is written
  auto request = net::recv_request(socket, limits, &lease);
  if (!request) {
    // A peer that hangs up between frames is the normal end of a connection.
    if (!net::is_clean_close(request.error())) {
      std::fprintf(stderr, "troupe: tensor channel: %s %s: %s\n",
                   request.error().code == core::Errc::unavailable ? "ended the connection of"
                                                                   : "rejected a request from",
                   peer.c_str(), request.error().to_string().c_str());
      (void)net::send_reply(socket, request.error());
    }
    return false;
  }
  core::Expected<std::vector<net::PsItem>> reply = std::vector<net::PsItem>{};
  const net::WireDtype wire = request->wire;  // the reply goes as the request came
  bool timed_out = false;
  const auto op = static_cast<net::PsOp>(request->op);
  if (shared_ && options_.direct) {
    // Straight on the shards, no hop to the actor and back.
    reply = op == net::PsOp::pull || op == net::PsOp::pull_rows ? read(*request) : update(*request);
  } else {
    caf::scoped_actor self{sys_};
    const core::Status answered = net::ask(
        *self, shard_, {options_.answer_timeout, "the PS shard's answer", &timed_out},
        [&](std::vector<net::PsItem>& items) { reply = std::move(items); }, net::batch_atom::value,
        std::move(*request));
    if (!answered) reply = answered.error();
  }
  // A timed-out request may still be applied: the peer cannot know, so the connection
  // ends after the error; its next request reconnects and is tagged as before.
  return net::send_reply(socket, reply, wire) && !timed_out;
}

}  // namespace troupe::actors
