#pragma once

// The tensor channel: batched PS requests and their replies over a plain TCP stream,
// tensor bytes written from and read into the tensors' own memory. CAF stays the control
// plane (closures, placement, failure detection); this carries the bulk bytes of the hot
// path (pull, push, push-pull). Frame layout: docs/wire-format.md.

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "core/expected.hpp"
#include "net/byte_budget.hpp"
#include "net/socket.hpp"
#include "net/wire.hpp"

namespace troupe::net {

/// Bounds on what a frame may claim, checked before anything is allocated, and on how
/// long a reader waits.
struct ChannelLimits {
  uint32_t max_items = 1u << 16;
  uint32_t max_meta_bytes = 16u << 20;
  uint64_t max_payload_bytes = max_wire_tensor_bytes;
  /// Longest wait for the next frame to begin (0: no limit); a connection idle for longer
  /// is `unavailable` ("idle"). Within a frame the socket's own timeout applies
  /// (net::set_io_timeout).
  std::chrono::milliseconds idle_timeout{0};
  /// Requests reserve what they will take (metadata, items and payload) here before any
  /// of it is allocated, for as long as the caller holds the lease recv_request hands
  /// back; a frame larger than the budget is refused, one that finds no room within
  /// `budget_wait` is `unavailable`. Null: not counted.
  ByteBudget* budget = nullptr;
  std::chrono::milliseconds budget_wait{60000};
};

/// The tensor channel's defaults for a PS task. A worker stops using a pooled connection
/// idle for half of `channel_idle_timeout`, before the PS could have ended it.
inline constexpr std::chrono::milliseconds channel_idle_timeout{600000};
inline constexpr std::chrono::milliseconds channel_stall_timeout{30000};
inline constexpr uint64_t channel_memory_budget = uint64_t{4} << 30;

/// The error a read returns when the peer closed the connection between frames: the normal
/// end of a connection, not a fault.
bool is_clean_close(const core::Error& e);

core::Status send_request(const Socket& s, const PsRequest& request);
/// The next request. A peer that closed the connection between frames is `unavailable`;
/// a frame that is malformed, truncated or over `limits` is `data_loss` or
/// `invalid_argument`, and the stream cannot be read further.
core::Expected<PsRequest> recv_request(const Socket& s, const ChannelLimits& limits = {},
                                       ByteBudget::Lease* lease = nullptr);

/// Sends the PS's items (their tensors as `wire`: the request's), or its error.
core::Status send_reply(const Socket& s, const core::Expected<std::vector<PsItem>>& reply,
                        WireDtype wire = WireDtype::float32);
/// The reply: the PS's items, the error the PS sent, or what went wrong on the way.
core::Expected<std::vector<PsItem>> recv_reply(const Socket& s, const ChannelLimits& limits = {});

}  // namespace troupe::net
