#pragma once

// What a MultiWorkerMirroredStrategy holds (api/mirrored_strategy.cpp: forming, mirroring,
// re-forming; api/replica_context.cpp: a step's collectives). Internal, not an interface.

#include <memory>
#include <string>
#include <vector>

#include "actors/collective/elastic_ring.hpp"
#include "core/collective/collective.hpp"
#include "core/collective/engine.hpp"
#include "troupe/mirrored_strategy.hpp"

namespace troupe {

struct MultiWorkerMirroredStrategy::Impl {
  MirroredOptions options;
  int slot = 0;
  std::unique_ptr<collective::ElasticRing> ring;
  std::unique_ptr<collective::Group> group;
  std::vector<collective::Buffer> state;
  bool mirrored_before = false;  // mirror() ran in this process
  /// Every collective on the ring goes through it (one at a time, in order); declared
  /// last, so it ends (its running collective with it) before the ring it uses.
  collective::Engine engine;

  /// Runs a collective of the strategy's own (a broadcast, a membership or metric
  /// reduction) on the caller's thread after everything submitted; its failure is
  /// reported here, and the engine forgets it.
  core::Status now(const std::string& what, const collective::Engine::Job& job) {
    auto st = engine.call(what, job);
    if (!st) (void)engine.drain();
    return st;
  }
};

}  // namespace troupe
