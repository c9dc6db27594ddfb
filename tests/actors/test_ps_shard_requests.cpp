// A PS shard's batched requests: every item under one tag, the rows and bytes they move,
// and the row stride of an interleaved shard through a snapshot.
#include <catch2/catch.hpp>

#include <utility>
#include <vector>

#include "actors/ps_shard_state.hpp"
#include "ps_shard_helpers.hpp"

using namespace troupe;
using actors::PsShardState;
using test::def;
using test::tensor;

TEST_CASE("A batched PS request runs every item under one tag", "[ps_shard]") {
  PsShardState ps;
  REQUIRE(ps.create(def("w", {2, 2})).ok());
  REQUIRE(ps.create(def("emb", {4, 1})).ok());
  using net::PsOp;
  auto run = [&](PsOp op, uint64_t tag, std::vector<net::PsItem> items) {
    net::PsRequest r{static_cast<uint8_t>(op), tag, std::move(items)};
    return ps.handle(r);
  };
  // push_pull: both variables updated once, their new values returned in request order.
  const std::vector<net::PsItem> grads{{"w#0", {}, tensor({2, 2}, {1, 1, 1, 1})},
                                       {"emb#0", {}, tensor({4, 1}, {2, 2, 2, 2})}};
  auto r = run(PsOp::push_pull, 7, grads);
  REQUIRE(r.ok());
  REQUIRE(r->size() == 2);
  CHECK(r->at(0).tensor.data == std::vector<float>{0.5f, 0.5f, 0.5f, 0.5f});
  CHECK(r->at(1).tensor.data == std::vector<float>{0.0f, 0.0f, 0.0f, 0.0f});
  // The same tag again (a retried closure): nothing applied, the values as they are.
  r = run(PsOp::push_pull, 7, grads);
  REQUIRE(r.ok());
  CHECK(r->at(0).tensor.data == std::vector<float>{0.5f, 0.5f, 0.5f, 0.5f});
  CHECK(ps.counters().updates_duplicate == 2);
  // Rows: pushed and pulled by shard-local index.
  REQUIRE(run(PsOp::push_rows, 8, {{"emb#0", {1, 3}, tensor({2, 1}, {-2, -4})}}).ok());
  auto rows = run(PsOp::pull_rows, 0, {{"emb#0", {3, 1, 0}, {}}});
  REQUIRE(rows.ok());
  CHECK(rows->at(0).tensor.dims == std::vector<int64_t>{3, 1});
  CHECK(rows->at(0).tensor.data == std::vector<float>{2.0f, 1.0f, 0.0f});
  // A plain push answers with an empty item per request item.
  auto acks = run(PsOp::push, 9, {{"w#0", {}, tensor({2, 2}, {1, 1, 1, 1})}});
  REQUIRE(acks.ok());
  CHECK(acks->at(0).tensor.data.empty());
  // Unknown ops and bad items are errors that change nothing.
  CHECK(run(static_cast<PsOp>(0), 10, grads).error().code == core::Errc::invalid_argument);
  CHECK(run(static_cast<PsOp>(6), 10, grads).error().code == core::Errc::invalid_argument);
  auto bad = run(PsOp::pull, 0, {{"w#0", {}, {}}, {"nope", {}, {}}});
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().code == core::Errc::not_found);
  auto w = run(PsOp::pull, 0, {{"w#0", {}, {}}});
  CHECK(w->at(0).tensor.data == std::vector<float>{0.0f, 0.0f, 0.0f, 0.0f});
}

TEST_CASE("A PS shard counts the rows and bytes its batched requests move", "[ps_shard]") {
  PsShardState ps;
  REQUIRE(ps.create(def("w", {2, 3})).ok());
  REQUIRE(ps.create(def("emb", {10, 4})).ok());
  using net::PsOp;
  auto run = [&](PsOp op, uint64_t tag, std::vector<net::PsItem> items) {
    net::PsRequest r{static_cast<uint8_t>(op), tag, std::move(items)};
    return ps.handle(r);
  };
  REQUIRE(run(PsOp::pull_rows, 0, {{"emb#0", {1, 2, 3}, {}}}).ok());
  REQUIRE(
      run(PsOp::push_rows, 1, {{"emb#0", {4, 5}, tensor({2, 4}, std::vector<float>(8, 1))}}).ok());
  REQUIRE(run(PsOp::push_pull, 2, {{"w#0", {}, tensor({2, 3}, std::vector<float>(6, 1))}}).ok());
  const net::PsLoad& load = ps.counters().load;
  CHECK(load.rows_out == 3 + 2);  // three table rows, then w's two rows back
  CHECK(load.bytes_out == (3 * 4 + 6) * 4);
  CHECK(load.rows_in == 2 + 2);
  CHECK(load.bytes_in == (8 + 6) * 4);
}

TEST_CASE("An interleaved shard keeps its row stride through a snapshot, a bad one is refused",
          "[ps_shard]") {
  PsShardState ps;
  auto d = def("emb", {3, 2});
  d.shard = 1;
  d.row_offset = 1;
  d.row_stride = 4;
  REQUIRE(ps.create(d).ok());
  auto restored = PsShardState::from_snapshot(ps.snapshot());
  REQUIRE(restored.ok());
  REQUIRE(restored->definitions().size() == 1);
  CHECK(restored->definitions()[0].row_stride == 4);
  // A first row past the stride, a dynamic table interleaved, a stride of 0: refused.
  for (auto bad : {std::pair<int64_t, int64_t>{4, 4}, {0, 0}}) {
    auto b = def("other", {3, 2});
    b.row_offset = bad.first;
    b.row_stride = bad.second;
    CHECK(ps.create(b).error().code == core::Errc::invalid_argument);
  }
  auto dyn = def("dyn", {3, 2});
  dyn.dynamic = true;
  dyn.row_stride = 2;
  CHECK(ps.create(dyn).error().code == core::Errc::invalid_argument);
}
