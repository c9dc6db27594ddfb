// The process's relay pool (net/relay_pool.hpp): CAF links relayed on one thread.

#include <catch2/catch.hpp>

#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "net/relay_pool.hpp"

using namespace troupe;
using namespace std::chrono_literals;

namespace {

// A link's two ends as the test holds them: `network` stands for the peer across the
// network (its bytes pass the BASP check), `caf` for this process's CAF.
struct Ends {
  net::Socket network, caf;
};

std::pair<net::Socket, net::Socket> socket_pair() {
  int fds[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0);
  return {net::Socket(fds[0]), net::Socket(fds[1])};
}

// What `ended` reported, waited for.
struct Outcome {
  std::mutex mu;
  std::condition_variable cv;
  std::optional<core::Status> status;
  net::RelayPool::Ended callback() {
    return [this](core::Status st) {
      std::lock_guard<std::mutex> lock(mu);
      status = std::move(st);
      cv.notify_all();
    };
  }
  std::optional<core::Status> wait(std::chrono::milliseconds t) {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait_for(lock, t, [&] { return status.has_value(); });
    return status;
  }
};

// `send_buffer`, when set: each of the pool's two ends sends at most that many bytes ahead
// of its reader, so the pool meets a full socket (and holds bytes back) whatever the
// reader's speed.
Ends relayed(uint64_t group, Outcome& outcome, uint32_t max_payload = 1u << 20,
             int send_buffer = 0) {
  auto [network, outside] = socket_pair();
  auto [caf, inside] = socket_pair();
  if (send_buffer > 0)
    for (const net::Socket* s : {&outside, &inside})
      REQUIRE(::setsockopt(s->fd(), SOL_SOCKET, SO_SNDBUF, &send_buffer, sizeof send_buffer) == 0);
  REQUIRE(net::RelayPool::process().add(group, outside, inside, max_payload, outcome.callback()));
  return {std::move(network), std::move(caf)};
}

std::array<unsigned char, 32> basp_header(unsigned char operation, uint32_t payload) {
  std::array<unsigned char, 32> h{};
  h[0] = operation;
  for (int i = 0; i < 4; ++i)
    h[4 + i] = static_cast<unsigned char>(payload >> (24 - 8 * i));
  return h;
}

// Reads exactly `n` bytes (false at the end of the stream or after 10 s without any).
bool read_exactly(const net::Socket& s, unsigned char* p, size_t n) {
  net::set_io_timeout(s, 10s);
  while (n > 0) {
    const ssize_t r = ::recv(s.fd(), p, n, 0);
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

bool ends_within(const net::Socket& s, std::chrono::milliseconds t) {
  net::set_io_timeout(s, t);
  unsigned char b;
  return ::recv(s.fd(), &b, 1, 0) == 0;
}

size_t threads_of_this_process() {
  size_t n = 0;
  for ([[maybe_unused]] auto& e : std::filesystem::directory_iterator("/proc/self/task"))
    ++n;
  return n;
}

}  // namespace

// Eight MiB each way at once through small socket buffers: what a side cannot take waits in
// the link, its sender is not read meanwhile, and every byte arrives in order.
TEST_CASE("The relay pool carries both ways in order under backpressure", "[net][relay]") {
  auto& pool = net::RelayPool::process();
  const auto group = pool.new_group();
  Outcome outcome;
  auto ends = relayed(group, outcome, 1u << 20, 4096);
  constexpr uint32_t frame = 60000;
  constexpr int frames = 140;  // 8.4 MB from the network side, as BASP frames
  std::vector<unsigned char> stream;
  for (int f = 0; f < frames; ++f) {
    auto h = basp_header(0x02, frame);
    stream.insert(stream.end(), h.begin(), h.end());
    for (uint32_t i = 0; i < frame; ++i)
      stream.push_back(static_cast<unsigned char>((f * 131 + i * 7) & 0xff));
  }
  std::vector<unsigned char> back(8u << 20);
  for (size_t i = 0; i < back.size(); ++i)
    back[i] = static_cast<unsigned char>(i * 13 + 5);

  net::set_io_timeout(ends.network, 10s);
  net::set_io_timeout(ends.caf, 10s);
  std::thread to_caf([&] { CHECK(net::send_all(ends.network, stream.data(), stream.size())); });
  std::thread to_network([&] { CHECK(net::send_all(ends.caf, back.data(), back.size())); });
  std::vector<unsigned char> got_network(back.size());
  std::thread network_reader(
      [&] { CHECK(read_exactly(ends.network, got_network.data(), got_network.size())); });
  // CAF's side reads in small pieces; the small send buffers make the pool hold bytes back.
  std::vector<unsigned char> got_caf(stream.size());
  size_t have = 0;
  while (have < got_caf.size()) {
    const size_t n = std::min<size_t>(4096, got_caf.size() - have);
    REQUIRE(read_exactly(ends.caf, got_caf.data() + have, n));
    have += n;
  }
  to_caf.join();
  to_network.join();
  network_reader.join();
  CHECK(got_caf == stream);
  CHECK(got_network == back);
  CHECK(pool.size(group) == 1);
  CHECK_FALSE(outcome.status.has_value());

  ends.network.close();  // the network side goes: CAF's side sees its link end
  CHECK(ends_within(ends.caf, 5s));
  auto st = outcome.wait(5s);
  REQUIRE(st.has_value());
  CHECK(st->ok());
  CHECK(pool.wait_empty(group, std::chrono::steady_clock::now() + 5s));
}

// CAF writes its last bytes (a shutdown acknowledgement) and closes at once: while the
// network side is slow to read, those bytes wait in the link, and they all get out before
// the link ends.
TEST_CASE("The relay pool delivers what CAF wrote before it closed", "[net][relay]") {
  auto& pool = net::RelayPool::process();
  const auto group = pool.new_group();
  Outcome outcome;
  auto ends = relayed(group, outcome, 1u << 20, 4096);
  std::vector<unsigned char> last(160u << 10);
  for (size_t i = 0; i < last.size(); ++i)
    last[i] = static_cast<unsigned char>(i * 29 + 1);
  std::thread caf([&] {
    net::set_io_timeout(ends.caf, 10s);
    CHECK(net::send_all(ends.caf, last.data(), last.size()));
    ends.caf.close();
  });
  // Read only once CAF has written everything and closed: the rest waits in the link.
  // Meanwhile the network side goes on sending (heartbeats), for nobody now.
  caf.join();
  auto heartbeat = basp_header(0x06, 0);
  for (int i = 0; i < 3; ++i)
    REQUIRE(net::send_all(ends.network, heartbeat.data(), heartbeat.size()));
  std::vector<unsigned char> got(last.size());
  REQUIRE(read_exactly(ends.network, got.data(), got.size()));
  CHECK(got == last);
  CHECK(ends_within(ends.network, 5s));
  auto st = outcome.wait(5s);
  REQUIRE(st.has_value());
  CHECK(st->ok());
}

// A frame CAF must not read (an unknown operation, an oversized payload) ends the link
// before CAF gets it, and says why.
TEST_CASE("The relay pool ends a link whose frame fails the BASP check", "[net][relay]") {
  auto& pool = net::RelayPool::process();
  const auto group = pool.new_group();
  Outcome outcome;
  auto ends = relayed(group, outcome, 1000);
  auto h = basp_header(0x02, 5000);  // announces more than the limit of 1000
  REQUIRE(net::send_all(ends.network, h.data(), h.size()));
  auto st = outcome.wait(5s);
  REQUIRE(st.has_value());
  REQUIRE_FALSE(st->ok());
  CHECK(st->error().message.find("5000 payload bytes") != std::string::npos);
  CHECK(ends_within(ends.caf, 5s));  // nothing of it reached CAF, and the link is closed
  CHECK(ends_within(ends.network, 5s));
}

// close(group) ends that group's links (a gate stopping, close_tunnels_to) and no other;
// a hundred links cost the process no thread beyond the pool's one.
TEST_CASE("The relay pool closes one group's links on one thread for all", "[net][relay]") {
  auto& pool = net::RelayPool::process();
  const auto closing = pool.new_group(), staying = pool.new_group();
  Outcome first;
  relayed(pool.new_group(), first);  // the pool's thread runs from here on
  const size_t threads_before = threads_of_this_process();
  constexpr int links = 100;
  std::vector<Outcome> outcomes(2 * links);
  std::vector<Ends> ends;
  for (int i = 0; i < 2 * links; ++i)
    ends.push_back(relayed(i < links ? closing : staying, outcomes[i]));
  CHECK(threads_of_this_process() == threads_before);
  CHECK(pool.size(closing) == links);
  CHECK(pool.size(staying) == links);

  pool.close(closing);
  CHECK(pool.size(closing) == 0);
  for (int i = 0; i < links; ++i) {
    CHECK(outcomes[i].status.has_value());  // close() returns once each has ended
    CHECK(ends_within(ends[i].caf, 5s));
  }
  // The other group's links still carry.
  auto h = basp_header(0x06, 0);
  for (int i = links; i < 2 * links; ++i) {
    REQUIRE(net::send_all(ends[i].network, h.data(), h.size()));
    std::array<unsigned char, 32> got{};
    REQUIRE(read_exactly(ends[i].caf, got.data(), got.size()));
    CHECK(got == h);
  }
  CHECK(pool.size(staying) == links);
  pool.close(staying);
  CHECK(pool.size(staying) == 0);
}
