#include <catch2/catch.hpp>

#include <caf/all.hpp>

#include "net/wire.hpp"

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
  cfg.add_message_types<caf::id_block::troupe>();
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
}

TEST_CASE("Troupe errors survive the trip through caf::error", "[wire]") {
  auto e = net::to_caf(core::make_error(core::Errc::out_of_range, "row 9 outside 'w'"));
  auto back = net::from_caf(e);
  CHECK(back.code == core::Errc::out_of_range);
  CHECK(back.message == "row 9 outside 'w'");
  CHECK(net::from_caf(caf::make_error(caf::sec::request_timeout)).code == core::Errc::unavailable);
}
