#include <catch2/catch.hpp>

#include <caf/all.hpp>

#include "core/dynamic_table.hpp"
#include "net/wire.hpp"
#include "troupe/codec.hpp"

using namespace troupe;
using net::WireTensor;

namespace {

std::vector<char> serialize(caf::actor_system& sys, WireTensor& t) {
  std::vector<char> buf;
  caf::binary_serializer sink{sys, buf};
  REQUIRE_FALSE(inspect(sink, t));
  return buf;
}

}  // namespace

TEST_CASE("Tensors cross the wire as one raw block", "[wire]") {
  caf::actor_system_config cfg;
  troupe::net::add_wire_types(cfg);
  caf::actor_system sys{cfg};
  WireTensor t{{2, 3}, {1, 2, 3, 4, 5, 6}};
  auto buf = serialize(sys, t);
  // dims (count + 2 x i64) + payload count + 6 floats: no per-element framing.
  CHECK(buf.size() <= 8 + 16 + 8 + 6 * sizeof(float));
  WireTensor back;
  caf::binary_deserializer source{sys, buf};
  REQUIRE_FALSE(inspect(source, back));
  CHECK(back.dims == t.dims);
  CHECK(back.data == t.data);
  CHECK(back.consistent());
  CHECK_FALSE(WireTensor({{2, 2}, {1, 2, 3}}).consistent());
}

TEST_CASE("A truncated tensor or a lying length is rejected without a huge allocation", "[wire]") {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  WireTensor t{{1000}, std::vector<float>(1000, 1.0f)};
  auto buf = serialize(sys, t);
  buf.resize(buf.size() - 100);  // payload claims 1000 floats, 975 arrive
  WireTensor back;
  caf::binary_deserializer source{sys, buf};
  CHECK(inspect(source, back));
  CHECK(back.data.capacity() < 1000);
  // The same through the base class, as BASP hands it over: a count of 2^28 floats in a
  // few bytes is refused before the gigabyte is allocated.
  WireTensor small{{1}, {1.0f}};
  auto few = serialize(sys, small);
  WireTensor claimed;
  std::vector<char> lying(few.begin(), few.begin() + 1 + 8);  // dims: varbyte 1, one i64
  for (char c : {'\x80', '\x80', '\x80', '\x80', '\x01'})     // varbyte 2^28
    lying.push_back(c);
  caf::binary_deserializer basp_like{sys, lying};
  caf::deserializer& base = basp_like;
  CHECK(inspect(base, claimed));
  CHECK(claimed.data.capacity() < 1000);
}

TEST_CASE("Closure bytes announcing more than their payload are refused before allocating",
          "[wire]") {
  caf::actor_system_config cfg;
  troupe::net::add_wire_types(cfg);
  caf::actor_system sys{cfg};
  // A round trip of a closure message is unchanged...
  net::ClosureMsg c;
  c.step = "train";
  c.args = {'a', 'b', 'c'};
  std::vector<char> buf;
  caf::binary_serializer sink{sys, buf};
  REQUIRE_FALSE(inspect(sink, c));
  net::ClosureMsg back;
  caf::binary_deserializer source{sys, buf};
  REQUIRE_FALSE(inspect(source, back));
  CHECK(back.step == "train");
  CHECK(back.args == c.args);
  // ...but a byte sequence whose length (a varbyte: 2^30) is past the 3 bytes that follow
  // is refused with nothing allocated (CAF alone would resize to 1 GiB first).
  const std::vector<char> lying = {'\x80', '\x80', '\x80', '\x80', '\x04', 'x', 'y', 'z'};
  std::vector<char> bytes;
  caf::binary_deserializer lie{sys, lying};
  CHECK(lie(bytes));
  CHECK(bytes.capacity() < 1024);
  // Closure arguments (msgpack): an array header announcing 2^32 - 1 elements is refused
  // by its size, not by an allocation that failed (or did not).
  const std::vector<char> huge_array = {'\xdd', '\xff', '\xff', '\xff', '\xff'};
  auto decoded = decode<std::vector<int64_t>>(huge_array);
  REQUIRE_FALSE(decoded.ok());
  CHECK_THAT(decoded.error().message, Catch::Contains("size overflow"));
  auto fine = decode<std::vector<int64_t>>(encode_value(std::vector<int64_t>{1, 2, 3}));
  REQUIRE(fine.ok());
  CHECK(*fine == std::vector<int64_t>{1, 2, 3});
}

TEST_CASE("Troupe errors survive the trip through caf::error", "[wire]") {
  auto e = net::to_caf(core::make_error(core::Errc::out_of_range, "row 9 outside 'w'"));
  auto back = net::from_caf(e);
  CHECK(back.code == core::Errc::out_of_range);
  CHECK(back.message == "row 9 outside 'w'");
  CHECK(net::from_caf(caf::make_error(caf::sec::request_timeout)).code == core::Errc::unavailable);
}

TEST_CASE("Keys of a dynamic table are routed to the shard their hash names", "[wire]") {
  // Three dynamic shards (their row offsets are their numbers): each key goes to
  // core::dynamic_shard_of(key, 3), as itself (no offset taken off), with its position.
  std::vector<net::Placement> shards(3);
  for (int i = 0; i < 3; ++i) {
    shards[static_cast<size_t>(i)].def.shard = i;
    shards[static_cast<size_t>(i)].def.row_offset = i;
    shards[static_cast<size_t>(i)].def.shape = {0, 2};
    shards[static_cast<size_t>(i)].def.dynamic = true;
  }
  std::vector<int64_t> keys;
  for (int64_t i = 0; i < 300; ++i)
    keys.push_back((i - 150) * 0x0123456789abcdll);
  auto route = net::route_rows("ids", shards, keys);
  REQUIRE(route.ok());
  size_t routed = 0;
  for (size_t s = 0; s < 3; ++s) {
    CHECK(route->local[s].size() > 50);  // 300 keys over 3 shards: each gets a share
    REQUIRE(route->local[s].size() == route->where[s].size());
    for (size_t j = 0; j < route->local[s].size(); ++j) {
      const int64_t key = keys[static_cast<size_t>(route->where[s][j])];
      CHECK(route->local[s][j] == key);
      CHECK(core::dynamic_shard_of(key, 3) == static_cast<int64_t>(s));
    }
    routed += route->local[s].size();
  }
  CHECK(routed == keys.size());
  // The same keys on a fixed table of 3 x 100 rows are out of range.
  for (auto& p : shards) {
    p.def.dynamic = false;
    p.def.row_offset = p.def.shard * 100;
    p.def.shape = {100, 2};
  }
  CHECK(net::route_rows("ids", shards, keys).error().code == core::Errc::out_of_range);
}

TEST_CASE("Interleaved rows are routed to shard r % n at r / n and assembled back", "[wire]") {
  // A table of 7 rows over 3 shards interleaved: 3, 2, 2 rows.
  std::vector<net::Placement> shards(3);
  for (int i = 0; i < 3; ++i) {
    auto& def = shards[static_cast<size_t>(i)].def;
    def.shard = i;
    def.row_offset = i;
    def.row_stride = 3;
    def.shape = {i == 0 ? 3 : 2, 2};
  }
  const std::vector<int64_t> rows{0, 1, 5, 6, 4};
  auto route = net::route_rows("t", shards, rows);
  REQUIRE(route.ok());
  CHECK_FALSE(route->contiguous);
  CHECK(route->local == std::vector<std::vector<int64_t>>{{0, 2}, {0, 1}, {1}});
  CHECK(route->where == std::vector<std::vector<int64_t>>{{0, 3}, {1, 4}, {2}});
  CHECK(net::route_rows("t", shards, {7}).error().code == core::Errc::out_of_range);
  CHECK(net::route_rows("t", shards, {-1}).error().code == core::Errc::out_of_range);
  // A placement whose stride is not its shard count is refused, not misrouted.
  auto two = std::vector<net::Placement>(shards.begin(), shards.begin() + 2);
  CHECK_FALSE(net::route_rows("t", two, {1}).ok());

  // The whole variable: row r = {r, -r}; each shard's part, and the parts back.
  core::Tensor full{core::Shape{7, 2}};
  for (int64_t r = 0; r < 7; ++r) {
    full[2 * r] = static_cast<float>(r);
    full[2 * r + 1] = -static_cast<float>(r);
  }
  std::vector<net::WireTensor> parts;
  for (const auto& p : shards)
    parts.push_back(net::WireTensor::from(net::part_for_shard(full, p.def)));
  CHECK(parts[1].data == std::vector<float>{1, -1, 4, -4});
  auto back = net::concat_shards(parts, 3);
  REQUIRE(back.ok());
  CHECK(std::vector<float>(back->data(), back->data() + back->size()) ==
        std::vector<float>(full.data(), full.data() + full.size()));
  CHECK(net::concat_shards(parts, 2).error().code == core::Errc::data_loss);
}

TEST_CASE("Rows in ascending order are routed as one run per shard", "[wire]") {
  // A fixed table of 3 shards x 100 rows. Ascending rows take the run path; the same rows
  // shuffled take the row-by-row path; both put every row on its shard and gather alike.
  std::vector<net::Placement> shards(3);
  for (int i = 0; i < 3; ++i) {
    auto& def = shards[static_cast<size_t>(i)].def;
    def.shard = i;
    def.row_offset = 100 * i;
    def.shape = {100, 2};
  }
  const std::vector<int64_t> ascending{0, 7, 99, 100, 250, 299};
  const std::vector<int64_t> shuffled{250, 0, 299, 100, 99, 7};
  auto runs = net::route_rows("t", shards, ascending);
  auto each = net::route_rows("t", shards, shuffled);
  REQUIRE(runs.ok());
  REQUIRE(each.ok());
  CHECK(runs->contiguous);
  CHECK_FALSE(each->contiguous);
  CHECK(runs->local == std::vector<std::vector<int64_t>>{{0, 7, 99}, {0}, {50, 99}});
  CHECK(runs->where == std::vector<std::vector<int64_t>>{{0, 1, 2}, {3}, {4, 5}});
  // Each shard answers its rows' values (2 per row: the global row and its negative).
  auto answer = [&](const net::RowRoute& route, int shard) {
    net::WireTensor part;
    for (int64_t local : route.local[static_cast<size_t>(shard)]) {
      part.data.push_back(static_cast<float>(100 * shard + local));
      part.data.push_back(-static_cast<float>(100 * shard + local));
    }
    return part;
  };
  for (const auto* route : {&*runs, &*each}) {
    const auto& rows = route == &*runs ? ascending : shuffled;
    std::vector<net::WireTensor> parts{answer(*route, 0), answer(*route, 1), answer(*route, 2)};
    core::Tensor out{core::Shape{6, 2}};
    REQUIRE(net::gather_routed("t", *route, {&parts[0], &parts[1], &parts[2]}, out).ok());
    for (int64_t k = 0; k < 6; ++k) {
      CHECK(out.data()[2 * k] == static_cast<float>(rows[static_cast<size_t>(k)]));
      CHECK(out.data()[2 * k + 1] == -static_cast<float>(rows[static_cast<size_t>(k)]));
    }
    // And back: each shard's part of the gathered rows is what that shard answered.
    for (int shard = 0; shard < 3; ++shard)
      CHECK(net::routed_part(*route, static_cast<size_t>(shard), out) ==
            parts[static_cast<size_t>(shard)].data);
  }
  // A row below, above or between the shards is an error naming it, on either path.
  shards[1].def.shape = {50, 2};  // rows 150..199 now belong to no shard
  for (const std::vector<int64_t>& bad :
       {std::vector<int64_t>{-1, 5}, std::vector<int64_t>{5, 300}, std::vector<int64_t>{5, 160},
        std::vector<int64_t>{160, 5}}) {
    auto route = net::route_rows("t", shards, bad);
    REQUIRE_FALSE(route.ok());
    CHECK(route.error().code == core::Errc::out_of_range);
    const int64_t named = bad[0] == 5 ? bad[1] : bad[0];
    CHECK_THAT(route.error().message, Catch::Contains("row " + std::to_string(named) + " of 't'"));
  }
}
