#pragma once

#include <caf/all.hpp>

#include "actors/ps_shard_state.hpp"

namespace troupe::actors {

struct PsShardActorState {
  PsShardState shard;
  int32_t channel_port = 0;  // the tensor channel's port on this host; 0: none
  static inline const char* name = "troupe.ps_shard";
};

/// The actor of one parameter-server task. Requests (atoms in net/wire.hpp):
///   (create, VariableDef)                           -> ok
///   (pull, name)                                    -> WireTensor
///   (pullrows, name, rows)                          -> WireTensor
///   (push, closure_id, name, WireTensor)            -> bool (false: duplicate, ignored)
///   (pushpull, closure_id, name, WireTensor)        -> WireTensor (value after the push)
///   (pushrows, closure_id, name, RowsUpdate)        -> bool
///   (psbatch, PsRequest)                            -> [PsItem], one per request item
///   (channel)                                       -> int32 port of the tensor channel
///   (channel, int32 port)                           -> (sets it; sent by serve())
///   (stats)                                         -> [variables, pulls, applied,
///                                                      duplicate, rejected]
///   (shutdown)                                      -> the actor quits
/// Bad requests get an error reply; the actor keeps serving.
caf::behavior ps_shard(caf::stateful_actor<PsShardActorState>* self);

}  // namespace troupe::actors
