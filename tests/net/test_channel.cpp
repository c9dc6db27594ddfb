// The tensor channel's frames: what is sent is what arrives, and whatever a peer makes of
// a frame (truncated, lying lengths, garbage) is a clear error, never a crash or a huge
// allocation.
#include <catch2/catch.hpp>

#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <thread>

#include "core/half.hpp"
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

// `r` sent and received over a connected pair. A writer blocks until the reader drains
// the socket, so a request larger than its buffer needs a thread of its own.
core::Expected<net::PsRequest> stream(const net::PsRequest& r) {
  Pair p;
  core::Status sent;
  std::thread writer([&] { sent = net::send_request(p.a, r); });
  auto got = net::recv_request(p.b);
  writer.join();
  REQUIRE(sent.ok());
  return got;
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
  net::PsRequest r{static_cast<uint8_t>(net::PsOp::push), 1, {}};
  const int64_t n = int64_t{3} << 20;  // 12 MiB, far above a socket buffer
  r.items.push_back({"big", {}, {{n}, std::vector<float>(static_cast<size_t>(n))}});
  for (int64_t i = 0; i < n; ++i)
    r.items[0].tensor.data[static_cast<size_t>(i)] = static_cast<float>(i % 977);
  auto got = stream(r);
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
  // payload@24 settled_below@32 epoch@40, then metadata (from 48), then payload.
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
    const size_t meta = 48 + 4 + 3 + 4 + 3 * 8 + 1 + 4 + 2 * 8;
    uint64_t count = 0;
    std::memcpy(&count, bytes.data() + meta, sizeof count);
    REQUIRE(count == 6);  // the offset is the element count's
    put_u64(bytes, meta, uint64_t{1} << 60);
    auto r = decode(bytes);
    REQUIRE_FALSE(r);
    CHECK(r.error().code == core::Errc::data_loss);
    CHECK(r.error().message.find("'emb' is larger than the frame's payload") != std::string::npos);
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

namespace {

// The peak resident memory of this process, in bytes.
size_t peak_rss() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<size_t>(u.ru_maxrss) * 1024;
}

}  // namespace

TEST_CASE("A frame's claimed sizes cost memory only as their bytes arrive", "[net][channel]") {
  // A header and metadata claiming the largest payload the limits allow (2 GiB, one
  // tensor), then a few bytes and the end of the stream: the reader must find the frame
  // truncated without having allocated what it claimed.
  net::PsRequest r{static_cast<uint8_t>(net::PsOp::push), 1, {}};
  const uint64_t claimed = net::max_wire_tensor_bytes / sizeof(float);
  r.items.push_back({"huge", {}, {{static_cast<int64_t>(claimed)}, {1.0f, 2.0f}}});
  auto bytes = encode(r);
  put_u64(bytes, 24, claimed * sizeof(float));
  const size_t count_at = 48 + 4 + 4 + 4 + 1 + 4 + 8;
  put_u64(bytes, count_at, claimed);
  const size_t before = peak_rss();
  for (int i = 0; i < 4; ++i) {
    auto got = decode(bytes);
    REQUIRE_FALSE(got);
    CHECK(got.error().code == core::Errc::data_loss);
    CHECK(got.error().message.find("truncated") != std::string::npos);
  }
  // Zeroing what was claimed would have touched 2 GiB in each read; what may be allocated
  // ahead of the bytes is 64 MiB a read (under ASan its quarantine keeps all four).
  CHECK(peak_rss() < before + (size_t{1} << 30));

  SECTION("metadata too") {
    auto head = encode(sample_request());
    head.resize(48);
    put_u32(head, 12, 16u << 20);  // 16 MiB of metadata claimed, none sent
    auto got = decode(head);
    REQUIRE_FALSE(got);
    CHECK(got.error().code == core::Errc::data_loss);
  }
  SECTION("more items than the metadata could describe") {
    auto small = encode(sample_request());
    put_u32(small, 8, 1u << 16);
    auto got = decode(small);
    REQUIRE_FALSE(got);
    CHECK(got.error().message.find("65536 items in") != std::string::npos);
  }
}

TEST_CASE("A tensor larger than what is read ahead arrives whole", "[net][channel]") {
  // 80 MiB: past the 64 MiB a reader allocates ahead, so it grows the tensor as it reads.
  net::PsRequest r{static_cast<uint8_t>(net::PsOp::push), 2, {}};
  const size_t n = size_t{20} << 20;
  std::vector<float> data(n);
  for (size_t i = 0; i < n; ++i)
    data[i] = static_cast<float>(i % 10007);
  r.items.push_back({"big", {}, {{static_cast<int64_t>(n)}, data}});
  r.items.push_back({"after", {}, {{2}, {5.0f, 6.0f}}});
  auto got = stream(r);
  REQUIRE(got);
  REQUIRE(got->items.size() == 2);
  CHECK(got->items[0].tensor.data == data);
  CHECK(got->items[1].tensor.data == std::vector<float>{5.0f, 6.0f});
}

TEST_CASE("bf16 frames carry half the bytes and arrive as float32 rounded to bf16",
          "[net][channel]") {
  auto rounded = [](const std::vector<float>& v) {
    std::vector<float> r(v.size());
    for (size_t i = 0; i < v.size(); ++i)
      r[i] = core::round_to(v[i], core::DType::bfloat16);
    return r;
  };
  net::PsRequest r = sample_request();
  r.items[0].tensor.data = {1.0f / 3, -2.7182818f, 1e-3f, 65504.5f, 3.0e38f, -0.0f};
  const auto f32 = encode(r);
  r.wire = net::WireDtype::bfloat16;
  const auto bf16 = encode(r);
  uint64_t p32 = 0, p16 = 0;
  std::memcpy(&p32, f32.data() + 24, sizeof p32);
  std::memcpy(&p16, bf16.data() + 24, sizeof p16);
  CHECK(p16 * 2 == p32);  // every tensor's payload halved; metadata unchanged
  CHECK(f32.size() - bf16.size() == p32 - p16);
  CHECK(bf16[6] == 1);  // the header's wire byte
  auto got = decode(bf16);
  REQUIRE(got);
  CHECK(got->wire == net::WireDtype::bfloat16);
  REQUIRE(got->items.size() == r.items.size());
  for (size_t i = 0; i < r.items.size(); ++i) {
    INFO(r.items[i].name);
    CHECK(got->items[i].tensor.dims == r.items[i].tensor.dims);
    CHECK(got->items[i].tensor.data == rounded(r.items[i].tensor.data));
    CHECK(got->items[i].rows == r.items[i].rows);
  }
  CHECK(got->items[0].tensor.data != r.items[0].tensor.data);  // it was rounded

  SECTION("a reply goes in the type asked, an error frame as ever") {
    Pair p;
    const std::vector<net::PsItem> items{{"v", {}, {{3}, {0.1f, 0.2f, 0.3f}}}};
    REQUIRE(net::send_reply(p.a, items, net::WireDtype::bfloat16));
    auto reply = net::recv_reply(p.b);
    REQUIRE(reply);
    CHECK((*reply)[0].tensor.data == rounded(items[0].tensor.data));
    REQUIRE(net::send_reply(p.a, core::make_error(core::Errc::not_found, "no such variable"),
                            net::WireDtype::bfloat16));
    auto err = net::recv_reply(p.b);
    REQUIRE_FALSE(err);
    CHECK(err.error().message == "no such variable");
  }
  SECTION("an unknown wire type, or a payload that is not the bf16 tensors' size, is refused") {
    auto bad = bf16;
    bad[6] = 2;
    auto e = decode(bad);
    REQUIRE_FALSE(e);
    CHECK(e.error().code == core::Errc::data_loss);
    CHECK_THAT(e.error().message, Catch::Contains("unknown wire dtype 2"));
    auto as_f32 = bf16;  // bf16 bytes under a float32 header: the sizes do not add up
    as_f32[6] = 0;
    CHECK(decode(as_f32).error().code == core::Errc::data_loss);
  }
  SECTION("a PS's memory budget counts what a bf16 frame takes once read as float32") {
    net::PsRequest big{static_cast<uint8_t>(net::PsOp::push), 3, {}};
    big.wire = net::WireDtype::bfloat16;
    big.items.push_back({"g", {}, {{4096}, std::vector<float>(4096, 0.5f)}});
    const auto bytes = encode(big);  // 8 KiB of payload, 16 KiB as float32
    net::ByteBudget budget(12 << 10);
    net::ChannelLimits limits;
    limits.budget = &budget;
    auto refused = decode(bytes, limits);
    REQUIRE_FALSE(refused);
    CHECK(refused.error().code == core::Errc::invalid_argument);
    CHECK_THAT(refused.error().message, Catch::Contains("memory budget"));
  }
}

TEST_CASE("a bf16 tensor larger than one read streams through whole", "[net][channel]") {
  net::PsRequest r{static_cast<uint8_t>(net::PsOp::push), 4, {}};
  r.wire = net::WireDtype::bfloat16;
  const size_t n = (size_t{3} << 19) + 7;  // three 1 MiB reads and a tail
  std::vector<float> data(n);
  for (size_t i = 0; i < n; ++i)
    data[i] = static_cast<float>(i % 251) * 0.5f;  // exact in bf16
  r.items.push_back({"big", {}, {{static_cast<int64_t>(n)}, data}});
  auto got = stream(r);
  REQUIRE(got);
  CHECK(got->items[0].tensor.data == data);
}
