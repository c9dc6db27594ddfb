#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <caf/all.hpp>

#include "actors/shared_shard.hpp"
#include "core/expected.hpp"
#include "net/channel.hpp"
#include "net/connection_server.hpp"

namespace troupe::actors {

/// Environment variable: the memory budget of a PS task's channel in MiB
/// (ChannelServerOptions::memory_budget; 4096 when unset).
inline constexpr const char* channel_memory_env = "TROUPE_CHANNEL_MEMORY_MB";
/// Environment variable: "0" sends every request through the shard actor, pulls and
/// updates (ChannelServerOptions::direct; how the two are measured side by side).
inline constexpr const char* channel_direct_env = "TROUPE_CHANNEL_DIRECT";
/// Environment variable: "0" serves each connection on a thread of its own instead of
/// request by request (ChannelServerOptions::pooled; how the two are measured side by side).
inline constexpr const char* channel_pooled_env = "TROUPE_CHANNEL_POOLED";

/// How a ChannelServer guards itself; the defaults are a PS task's.
struct ChannelServerOptions {
  /// With a cluster secret, every connection must prove it (net/auth.hpp) before a frame
  /// is read; a peer that does not is refused, named on stderr and counted by the shard
  /// actor (`refused`). Empty: connections are not authenticated.
  std::string secret;
  /// Who this channel is ("ps:1"): a member's proof must be for it (net/auth.hpp).
  std::string identity;
  /// At most this many connections are open at once; one more is closed as it arrives,
  /// named and counted the same way.
  size_t max_connections = 256;
  /// Threads serving requests at first (net::RequestPool): more are started, up to
  /// max_connections, while requests wait for one (a slow peer holds its own).
  size_t threads = 4;
  /// Served request by request on a few threads (net::RequestPool), or each connection on
  /// a thread of its own, the whole time it is open. A thread of its own answers a small
  /// request sooner (one wake-up, not two: 4 KiB pulls took twice as long pooled on this
  /// 2-core machine) but costs a thread per worker. Unset: pooled from
  /// `pooled_from` expected members on.
  std::optional<bool> pooled;
  /// The members the job will have (its workers, chief and evaluators; 0: unknown).
  size_t expected_members = 0;
  static constexpr size_t pooled_from = 64;
  /// Connections held at once before they proved the secret (net::DoorOptions); past it
  /// the oldest is dropped.
  size_t max_unproven = 64;
  /// Bytes that the requests of all connections may hold at once, from the header read to
  /// the reply written; a request waits for room (net::ChannelLimits::budget).
  uint64_t memory_budget = net::channel_memory_budget;
  /// A connection with no frame for this long is ended (workers reconnect: they drop a
  /// pooled connection idle for half of it).
  std::chrono::milliseconds idle_timeout = net::channel_idle_timeout;
  /// Bound on the shard actor's answer to one request; past it the peer gets an unavailable
  /// error and the connection is ended (a worker's own bound on the request is 30 s).
  std::chrono::milliseconds answer_timeout{30000};
  /// Within a frame (and writing a reply), the longest wait for the peer; one that
  /// stalls longer is ended.
  std::chrono::milliseconds stall_timeout = net::channel_stall_timeout;
  /// Requests are served by the serving thread on the shards the actor shares
  /// (actors/shared_shard.hpp): pulls under their lock held shared, updates under it held
  /// exclusively, as the actor holds it for its own. Off, or with no shared shards, every
  /// request is handed to the actor and its answer awaited.
  bool direct = true;

  /// A PS task's options: `secret`, the budget from TROUPE_CHANNEL_MEMORY_MB when set (a
  /// value that is not 1..16777216 MiB is `invalid_argument` naming it), `direct` off
  /// when TROUPE_CHANNEL_DIRECT is "0", `pooled` off when TROUPE_CHANNEL_POOLED is "0" (any
  /// value of either but "0" or "1" is an error).
  static core::Expected<ChannelServerOptions> from_env(std::string secret);
};

/// The PS side of the tensor channel. It owns no state: it serves requests on the shards
/// the ps_shard actor shares with it (pulls under their lock shared, updates exclusively),
/// or, without shared shards, hands each to the actor as a local (batch, PsRequest)
/// message, moved, never copied, and writes the actor's answer back. Served request by
/// request by a few threads (net::RequestPool), not a thread per connection: a PS task of
/// hundreds of workers holds a handful. A request that finds them all busy gets another
/// one within RequestPool::Options::grow_after, so a slow or misbehaving peer stalls its
/// own requests, not the others'; a malformed frame gets an error reply, ends that
/// connection, and is reported on stderr naming the peer.
class ChannelServer {
 public:
  /// Listens on `host` (the PS task's own address) on a free port.
  static core::Expected<std::unique_ptr<ChannelServer>> start(
      caf::actor_system& sys, caf::actor shard, const std::string& host,
      ChannelServerOptions options = {}, std::shared_ptr<SharedShard> shared = {});
  ChannelServer(const ChannelServer&) = delete;
  ChannelServer& operator=(const ChannelServer&) = delete;

  uint16_t port() const { return server_->port(); }
  /// Connections open now, and the threads serving their requests.
  size_t connections() const { return server_->members(); }
  size_t serving_threads() const { return server_->serving_threads(); }
  /// Bytes the requests being served hold now.
  uint64_t memory_held() const { return budget_.held(); }
  /// Waits at most `bound` until the bytes held satisfy `pred` (for tests and monitors).
  bool wait_memory_held(const std::function<bool(uint64_t)>& pred,
                        std::chrono::milliseconds bound) const {
    return budget_.wait_held(pred, bound);
  }
  /// Stops accepting, ends every connection and joins the threads. Idempotent.
  void stop() { server_->stop(); }

 private:
  ChannelServer(caf::actor_system& sys, caf::actor shard, ChannelServerOptions options,
                std::shared_ptr<SharedShard> shared)
      : sys_(sys),
        shard_(std::move(shard)),
        shared_(std::move(shared)),
        options_(std::move(options)),
        budget_(options_.memory_budget) {}
  // One request of a member whose socket is readable; false ends its connection.
  bool serve_one(net::Socket& socket, const std::string& peer);
  core::Expected<std::vector<net::PsItem>> read(const net::PsRequest& request);
  core::Expected<std::vector<net::PsItem>> update(net::PsRequest& request);
  void refuse(const std::string& peer, const std::string& why);

  caf::actor_system& sys_;
  caf::actor shard_;
  std::shared_ptr<SharedShard> shared_;
  ChannelServerOptions options_;
  net::ByteBudget budget_;
  net::RefusalLog log_;  // before server_: its callbacks write here until it stops
  std::unique_ptr<net::ConnectionServer> server_;
};

}  // namespace troupe::actors
