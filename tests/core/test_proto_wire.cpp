#include <catch2/catch.hpp>

#include "core/proto_wire.hpp"

using namespace troupe::core;

TEST_CASE("The protobuf reader reads what the writer wrote and refuses lies", "[proto]") {
  std::string m;
  proto::put_key(m, 1, proto::varint);
  proto::put_varint(m, 300);
  proto::put_bytes(m, 2, "abc");
  proto::put_key(m, 3, proto::fixed32);
  proto::put_le<float>(m, 1.5f);
  proto::Reader r(m);
  auto a = r.next();
  REQUIRE(a.ok());
  CHECK((a->number == 1 && a->type == proto::varint && a->value == 300));
  auto b = r.next();
  REQUIRE(b.ok());
  CHECK((b->number == 2 && b->bytes == "abc"));
  auto c = r.next();
  REQUIRE(c.ok());
  float f = 0;
  std::memcpy(&f, &c->value, 4);
  CHECK(f == 1.5f);
  CHECK(r.done());

  // A length past the message, a cut varint, an 11-byte varint, a group wire type.
  std::string lying;
  proto::put_key(lying, 2, proto::length_delimited);
  proto::put_varint(lying, uint64_t{1} << 62);
  CHECK_THAT(proto::Reader(lying).next().error().message, Catch::Contains("runs past"));
  CHECK_THAT(proto::Reader(std::string("\x08\x80", 2)).next().error().message,
             Catch::Contains("cut off"));
  CHECK_THAT(proto::Reader(std::string("\x08") + std::string(11, '\x80')).next().error().message,
             Catch::Contains("longer than 10"));
  CHECK_THAT(proto::Reader(std::string("\x0b")).next().error().message,
             Catch::Contains("wire type 3"));
}
