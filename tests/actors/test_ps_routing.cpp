// Which replica serves a replicated shard (actors/ps_routing.hpp): the first live one, a
// failover only while every shard keeps a copy, epochs that only move forward.
#include <catch2/catch.hpp>

#include "actors/ps_routing.hpp"

using namespace troupe;

namespace {

net::Placement placed(int32_t shard, int32_t primary, std::vector<int32_t> backups) {
  net::Placement p;
  p.def.name = "v";
  p.def.shard = shard;
  p.ps_task = primary;
  p.backups = std::move(backups);
  return p;
}

}  // namespace

TEST_CASE("PsRouting serves each shard from its first live replica and fails over in epochs",
          "[actors][replicas]") {
  // Three shards over three tasks, two copies each: (0: 0,1) (1: 1,2) (2: 2,0).
  const std::vector<net::Placement> shards{placed(0, 0, {1}), placed(1, 1, {2}), placed(2, 2, {0})};
  CHECK(actors::replica_count(shards) == 2);
  actors::PsRouting r;
  CHECK(r.epoch() == 0);
  CHECK(r.primary(shards[1]) == 1);
  CHECK(r.live(shards[2]) == std::vector<int32_t>{2, 0});
  CHECK(r.under_replicated(shards, 2) == 0);

  REQUIRE(r.fail_over(1, shards));
  CHECK(r.epoch() == 1);
  CHECK(r.is_lost(1));
  CHECK(r.primary(shards[0]) == 0);  // a backup lost: the primary stays
  CHECK(r.primary(shards[1]) == 2);  // the primary lost: its backup serves
  CHECK(r.live(shards[1]) == std::vector<int32_t>{2});
  CHECK(r.under_replicated(shards, 2) == 2);
  CHECK_FALSE(r.fail_over(1, shards));  // lost already: no new epoch
  CHECK(r.epoch() == 1);

  // Task 2 now holds the only copy of shard 1: losing it too cannot fail over.
  CHECK_FALSE(r.fail_over(2, shards));
  CHECK(r.epoch() == 1);
  CHECK_FALSE(r.is_lost(2));

  // A worker's copy adopts newer epochs only.
  actors::PsRouting worker;
  CHECK(worker.update(r.epoch(), r.lost()));
  CHECK(worker.primary(shards[1]) == 2);
  CHECK_FALSE(worker.update(1, {}));  // the same epoch again changes nothing
  CHECK(worker.is_lost(1));
  CHECK(worker.update(3, {0, 1, 1}));
  CHECK(worker.lost() == std::vector<int32_t>{0, 1});
  CHECK(worker.primary(shards[0]) == -1);  // every copy lost
  CHECK(worker.live(shards[0]).empty());
}

TEST_CASE("Unreplicated placements never fail over", "[actors][replicas]") {
  const std::vector<net::Placement> shards{placed(0, 0, {}), placed(1, 1, {})};
  CHECK(actors::replica_count(shards) == 1);
  actors::PsRouting r;
  CHECK_FALSE(r.fail_over(0, shards));
  CHECK(r.epoch() == 0);
  CHECK(r.primary(shards[0]) == 0);
}
