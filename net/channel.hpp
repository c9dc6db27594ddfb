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
#include "net/socket.hpp"
#include "net/wire.hpp"

namespace troupe::net {

/// Bounds on what a frame may claim, checked before anything is allocated.
struct ChannelLimits {
  uint32_t max_items = 1u << 16;
  uint32_t max_meta_bytes = 16u << 20;
  uint64_t max_payload_bytes = max_wire_tensor_bytes;
};

core::Status send_request(const Socket& s, const PsRequest& request);
/// The next request. A peer that closed the connection between frames is `unavailable`;
/// a frame that is malformed, truncated or over `limits` is `data_loss` or
/// `invalid_argument`, and the stream cannot be read further.
core::Expected<PsRequest> recv_request(const Socket& s, const ChannelLimits& limits = {});

/// Sends the PS's items, or its error.
core::Status send_reply(const Socket& s, const core::Expected<std::vector<PsItem>>& reply);
/// The reply: the PS's items, the error the PS sent, or what went wrong on the way.
core::Expected<std::vector<PsItem>> recv_reply(const Socket& s, const ChannelLimits& limits = {});

}  // namespace troupe::net
