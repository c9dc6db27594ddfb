// The status knock at an elastic ring slot's door (the stall report's question), spoken by
// hand: a member asking about a collective gets the slot's answer; a knock claiming an
// oversized tag, or from a stranger, gets nothing and the slot goes on answering.
#include <sys/socket.h>

#include <catch2/catch.hpp>

#include "actors/collective/elastic_frames.hpp"
#include "actors/collective/elastic_ring.hpp"
#include "actors/collective/socket_io.hpp"
#include "net/auth.hpp"
#include "process.hpp"

using namespace troupe;
using namespace troupe::collective::elastic_detail;
using collective::ElasticRing;
using std::chrono::milliseconds;

namespace {

using troupe::test::secret;

// Connects to `address`, proves `proof` and sends a status knock claiming `claimed` tag
// bytes followed by `tag`. Returns the socket (the answer, if any, to be read from it).
net::Socket knock(const std::string& address, const std::string& proof, int64_t claimed,
                  const std::string& tag) {
  const auto port = static_cast<uint16_t>(std::stoi(address.substr(address.rfind(':') + 1)));
  auto s = net::connect_to("127.0.0.1", port, milliseconds(3000));
  REQUIRE(s.ok());
  (void)net::prove_membership(*s, proof, milliseconds(3000), elastic_identity(0));
  Knock k;
  k.kind = status_kind;
  k.group = 77;
  k.slot = 1;
  k.step = claimed;
  collective::detail::write_all(*s, &k, sizeof k);
  collective::detail::write_all(*s, tag.data(), tag.size());
  return std::move(*s);
}

}  // namespace

TEST_CASE("a slot answers a member's status knock and ignores malformed ones", "[elastic][stall]") {
  const auto addr = test::loopback_addresses(2);
  collective::ElasticOptions o;
  o.ring.group_id = 77;
  o.ring.secret = secret;
  o.ring.connect_timeout = milliseconds(20000);
  std::unique_ptr<ElasticRing> g1;
  std::thread t1([&] {
    auto g = ElasticRing::join(1, addr, o, 0, false);
    if (g) g1 = std::move(*g);
  });
  auto g0 = ElasticRing::join(0, addr, o, 0, false);
  t1.join();
  REQUIRE(g0.ok());
  REQUIRE(g1);
  // Both reduce "grad 1" on slot 1's thread and this one.
  std::thread r1([&] {
    float x = 1;
    (void)g1->ring().all_reduce(&x, 1, collective::Reduction::sum, "grad 1");
  });
  float x = 1;
  REQUIRE((*g0)->ring().all_reduce(&x, 1, collective::Reduction::sum, "grad 1").ok());
  r1.join();

  // Oversized: no answer, the connection just ends.
  {
    auto s = knock(addr[0], secret, 1 << 30, "");
    StatusHead h;
    CHECK_FALSE(collective::detail::read_within(s, &h, sizeof h, milliseconds(3000)));
  }
  // A stranger (wrong secret): refused before its knock is read.
  {
    auto s = knock(addr[0], "not the job's secret, also 32 b.", 6, "grad 1");
    StatusHead h;
    CHECK_FALSE(collective::detail::read_within(s, &h, sizeof h, milliseconds(3000)));
  }
  // A member: slot 0 has entered "grad 1" and not "grad 2"; its last was "grad 1", done.
  for (const std::string asked : {"grad 1", "grad 2"}) {
    auto s = knock(addr[0], secret, static_cast<int64_t>(asked.size()), asked);
    StatusHead h;
    REQUIRE(collective::detail::read_within(s, &h, sizeof h, milliseconds(3000)));
    CHECK(h.magic == status_magic);
    CHECK(h.entered == (asked == "grad 1" ? 1 : 0));
    CHECK(h.inside == 0);
    CHECK(h.failed == 0);
    CHECK(h.collectives == 1);
    CHECK(h.slot == 0);
    REQUIRE(h.tag_bytes == 6);
    std::string tag(6, '\0');
    REQUIRE(collective::detail::read_within(s, tag.data(), tag.size(), milliseconds(3000)));
    CHECK(tag == "grad 1");
  }
}
