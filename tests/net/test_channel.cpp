// The tensor channel's frames: what is sent is what arrives, and whatever a peer makes of
// a frame (truncated, lying lengths, garbage) is a clear error, never a crash or a huge
// allocation.
#include <catch2/catch.hpp>

#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "net/channel.hpp"
#include "net/socket_pair.hpp"

using namespace troupe;

namespace {

using Pair = test::SocketPair;

net::PsRequest sample_request() {
  net::PsRequest r;
  r.op = static_cast<uint8_t>(net::PsOp::push_rows);
  r.tag = (uint64_t{7} << 16) | 3;
  r.items.push_back({"emb", {4, 0, 9}, {{3, 2}, {1, 2, 3, 4, 5, 6}}});
  r.items.push_back({"bias", {}, {{}, {2.5f}}});   // a scalar
  r.items.push_back({"w", {}, {}});                // no tensor at all
  r.items.push_back({"empty", {}, {{0, 4}, {}}});  // zero rows, but a shape
  return r;
}

// The bytes send_request writes for `r`.
std::vector<char> encode(const net::PsRequest& r) {
  Pair p;
  REQUIRE(net::send_request(p.a, r));
  p.a.close();
  std::vector<char> bytes;
  char buf[4096];
  for (ssize_t n; (n = ::read(p.b.fd(), buf, sizeof buf)) > 0;)
    bytes.insert(bytes.end(), buf, buf + n);
  return bytes;
}

core::Expected<net::PsRequest> decode(const std::vector<char>& bytes,
                                      const net::ChannelLimits& limits = {}) {
  Pair p;
  REQUIRE(::write(p.a.fd(), bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size()));
  p.a.close();
  return net::recv_request(p.b, limits);
}

void put_u64(std::vector<char>& bytes, size_t offset, uint64_t v) {
  std::memcpy(bytes.data() + offset, &v, sizeof v);
}
void put_u32(std::vector<char>& bytes, size_t offset, uint32_t v) {
  std::memcpy(bytes.data() + offset, &v, sizeof v);
}

}  // namespace

TEST_CASE("Requests and replies cross the tensor channel intact", "[net][channel]") {
  Pair p;
  const auto sent = sample_request();
  REQUIRE(net::send_request(p.a, sent));
  auto got = net::recv_request(p.b);
  REQUIRE(got);
  CHECK(got->op == sent.op);
  CHECK(got->tag == sent.tag);
  REQUIRE(got->items.size() == sent.items.size());
  for (size_t i = 0; i < sent.items.size(); ++i) {
    CHECK(got->items[i].name == sent.items[i].name);
    CHECK(got->items[i].rows == sent.items[i].rows);
    CHECK(got->items[i].tensor.dims == sent.items[i].tensor.dims);
    CHECK(got->items[i].tensor.data == sent.items[i].tensor.data);
  }

  // A reply carries items back; an error reply carries the PS's code and message.
  REQUIRE(net::send_reply(p.b, got->items));
  auto items = net::recv_reply(p.a);
  REQUIRE(items);
  CHECK(items->at(0).tensor.data == sent.items[0].tensor.data);
  REQUIRE(net::send_reply(p.b, core::make_error(core::Errc::not_found, "no variable 'x'")));
  auto err = net::recv_reply(p.a);
  REQUIRE_FALSE(err);
  CHECK(err.error().code == core::Errc::not_found);
  CHECK(err.error().message == "no variable 'x'");

  // Several frames in a row stay in step.
  for (int k = 0; k < 3; ++k)
    REQUIRE(net::send_request(p.a, sent));
  for (int k = 0; k < 3; ++k)
    CHECK(net::recv_request(p.b).value().items.size() == sent.items.size());
}

TEST_CASE("A large tensor streams through the channel", "[net][channel]") {
  Pair p;
  net::PsRequest r{static_cast<uint8_t>(net::PsOp::push), 1, {}};
  const int64_t n = int64_t{3} << 20;  // 12 MiB, far above a socket buffer
  r.items.push_back({"big", {}, {{n}, std::vector<float>(static_cast<size_t>(n))}});
  for (int64_t i = 0; i < n; ++i)
    r.items[0].tensor.data[static_cast<size_t>(i)] = static_cast<float>(i % 977);
  // The writer blocks until the reader drains the socket, so it needs its own thread.
  core::Status sent;
  std::thread writer([&] { sent = net::send_request(p.a, r); });
  auto got = net::recv_request(p.b);
  writer.join();
  REQUIRE(sent.ok());
  REQUIRE(got);
  CHECK(got->items[0].tensor.data == r.items[0].tensor.data);
}

TEST_CASE("Every truncation of a frame is an error", "[net][channel]") {
  const auto bytes = encode(sample_request());
  CHECK(decode(bytes).ok());
  auto closed = decode({});
  REQUIRE_FALSE(closed);
  CHECK(closed.error().code == core::Errc::unavailable);  // the peer hung up between frames
  for (size_t len = 1; len < bytes.size(); ++len) {
    auto r = decode(std::vector<char>(bytes.begin(), bytes.begin() + static_cast<long>(len)));
    INFO("truncated to " << len << " of " << bytes.size() << " bytes");
    REQUIRE_FALSE(r);
    CHECK(r.error().code == core::Errc::data_loss);
  }
}

TEST_CASE("Lying or oversized frames are refused before allocating", "[net][channel]") {
  const auto good = encode(sample_request());
  // Header layout (docs/wire-format.md): magic@0 kind@4 op@5 count@8 meta@12 tag@16
  // payload@24, then metadata, then payload.
  SECTION("garbage") {
    std::vector<char> junk(64, 'x');
    auto r = decode(junk);
    REQUIRE_FALSE(r);
    CHECK(r.error().message.find("bad magic") != std::string::npos);
  }
  SECTION("a payload above the limit") {
    auto bytes = good;
    put_u64(bytes, 24, uint64_t{1} << 40);
    auto r = decode(bytes);
    REQUIRE_FALSE(r);
    CHECK(r.error().code == core::Errc::invalid_argument);
  }
  SECTION("more items than allowed, or than the metadata holds") {
    auto bytes = good;
    put_u32(bytes, 8, 1u << 30);
    CHECK(decode(bytes).error().code == core::Errc::invalid_argument);
    put_u32(bytes, 8, 5);  // one more item than was written
    CHECK(decode(bytes).error().code == core::Errc::data_loss);
  }
  SECTION("metadata above the limit") {
    net::ChannelLimits small;
    small.max_meta_bytes = 16;
    CHECK(decode(good, small).error().code == core::Errc::invalid_argument);
  }
  SECTION("a payload that does not add up to the tensors") {
    auto bytes = good;
    uint64_t payload;
    std::memcpy(&payload, bytes.data() + 24, sizeof payload);
    put_u64(bytes, 24, payload - 4);
    bytes.resize(bytes.size() - 4);
    CHECK(decode(bytes).error().code == core::Errc::data_loss);
  }
  SECTION("a tensor length far beyond the payload") {
    // The first item's element count sits after its name, rows, flag, rank and dims.
    auto bytes = good;
    const size_t meta = 32 + 4 + 3 + 4 + 3 * 8 + 1 + 4 + 2 * 8;
    put_u64(bytes, meta, uint64_t{1} << 60);
    auto r = decode(bytes);
    REQUIRE_FALSE(r);
    CHECK(r.error().code == core::Errc::data_loss);
    CHECK(r.error().message.find("emb") != std::string::npos);
  }
  SECTION("an unknown error code in a reply") {
    Pair p;
    REQUIRE(net::send_reply(p.a, core::make_error(core::Errc::internal, "x")));
    std::vector<char> bytes(64);
    const ssize_t n = ::read(p.b.fd(), bytes.data(), bytes.size());
    REQUIRE(n > 32);
    bytes.resize(static_cast<size_t>(n));
    put_u32(bytes, 8, 999);
    Pair q;
    REQUIRE(::write(q.a.fd(), bytes.data(), bytes.size()) == n);
    CHECK(net::recv_reply(q.b).error().code == core::Errc::data_loss);
  }
}
