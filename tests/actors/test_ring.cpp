// Ring all-reduce among ranks run as threads of this process, over real loopback TCP:
// exact sums against a serial sum for many sizes and rank counts, fusion, the stall report,
// mismatched tensors, a stranger at the door, a rank that dies; broadcast; the ring behind
// the collective interface. Its shared-memory links are tested in test_ring_links.cpp.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <future>
#include <mutex>
#include <random>
#include <thread>

#include <catch2/catch.hpp>

#include "actors/collective/ring.hpp"
#include "actors/collective/ring_implementation.hpp"
#include "helpers.hpp"
#include "net/auth.hpp"
#include "process.hpp"
#include "ring_ranks.hpp"

using namespace troupe;
using collective::Reduction;
using collective::Ring;
using collective::RingOptions;
using test::on_ranks;
using test::shm_available;
using test::value;

// Both transports: the ranks' shared-memory links (all on this host) and plain TCP. The
// largest size is over the link's 4 MiB ring buffer, so its counters wrap round.
// Small integers are bfloat16 values too, and so is every partial sum of them: with
// bfloat16 on the wire the sums are exact as well.
TEST_CASE("ring all-reduce sums exactly for any size and rank count", "[ring]") {
  const int ranks = GENERATE(1, 2, 3, 4);
  const bool shared_memory = GENERATE(true, false);
  const auto wire = GENERATE(core::DType::float32, core::DType::bfloat16);
  CAPTURE(ranks, shared_memory, core::dtype_name(wire));
  const std::vector<size_t> sizes{
      0, 1, 2, 3, 5, 7, 64, 1000, 4097, 65536 + 1, (size_t{1} << 18) + 3, (size_t{5} << 20) + 1};
  std::atomic<int> checked{0};
  RingOptions o;
  o.shared_memory = shared_memory;
  on_ranks(ranks, o, [&](int rank, Ring& ring) {
    CHECK(ring.stats().shared_memory_links ==
          (shared_memory && ranks > 1 && shm_available() ? 2 : 0));
    for (size_t n : sizes) {
      std::vector<float> data(n);
      for (size_t i = 0; i < n; ++i)
        data[i] = value(rank, i);
      const auto st =
          ring.all_reduce(data.data(), n, Reduction::sum, "t" + std::to_string(n), wire);
      CHECK(st.ok());
      size_t wrong = 0;
      for (size_t i = 0; i < n; ++i) {
        float expected = 0;
        for (int r = 0; r < ranks; ++r)
          expected += value(r, i);
        wrong += data[i] != expected;
      }
      CHECK(wrong == 0);
      ++checked;
    }
    // Mean: with a power-of-two rank count the division is exact too.
    if (ranks == 1 || ranks == 2 || ranks == 4) {
      std::vector<float> data(10, static_cast<float>(rank));
      REQUIRE(ring.all_reduce(data.data(), data.size(), Reduction::mean, "mean", wire).ok());
      CHECK(data[9] == static_cast<float>(ranks - 1) / 2.0f);
    }
  });
  CHECK(checked == ranks * static_cast<int>(sizes.size()));
}

// Values that bfloat16 cannot hold: what each rank sends is rounded, so the result differs
// from float32's sum, but by at most a few bfloat16 roundings, and every rank ends with the
// same bits (the replicas of a mirrored job stay equal) in half the bytes.
TEST_CASE("ring all-reduce with bfloat16 on the wire leaves every rank equal in half the bytes",
          "[ring][bf16]") {
  const int ranks = GENERATE(2, 3, 4);
  const bool shared_memory = GENERATE(true, false);
  CAPTURE(ranks, shared_memory);
  const size_t n = GENERATE(size_t{1}, size_t{1001}, (size_t{3} << 20) + 5);
  CAPTURE(n);
  const auto input = [](int rank, size_t n) {
    std::mt19937 gen(static_cast<uint32_t>(rank * 7919 + 1));
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> v(n);
    for (auto& x : v)
      x = u(gen) * (1.0f + static_cast<float>(gen() % 1000));  // magnitudes 1 to 1000
    return v;
  };
  std::vector<std::vector<float>> results(static_cast<size_t>(ranks));
  std::vector<uint64_t> f32_bytes(static_cast<size_t>(ranks)),
      bf16_bytes(static_cast<size_t>(ranks));
  RingOptions o;
  o.shared_memory = shared_memory;
  on_ranks(ranks, o, [&](int rank, Ring& ring) {
    auto data = input(rank, n);
    auto before = ring.stats().bytes_sent;
    REQUIRE(ring.all_reduce(data.data(), n, Reduction::sum, "f32").ok());
    f32_bytes[static_cast<size_t>(rank)] = ring.stats().bytes_sent - before;
    data = input(rank, n);
    before = ring.stats().bytes_sent;
    REQUIRE(ring.all_reduce(data.data(), n, Reduction::sum, "bf16", core::DType::bfloat16).ok());
    bf16_bytes[static_cast<size_t>(rank)] = ring.stats().bytes_sent - before;
    results[static_cast<size_t>(rank)] = std::move(data);
  });
  std::vector<std::vector<float>> inputs;
  for (int r = 0; r < ranks; ++r)
    inputs.push_back(input(r, n));
  size_t unequal = 0, outside = 0, rounded = 0;
  for (size_t i = 0; i < n; ++i) {
    double exact = 0, magnitude = 0;
    for (int r = 0; r < ranks; ++r) {
      exact += inputs[static_cast<size_t>(r)][i];
      magnitude += std::abs(inputs[static_cast<size_t>(r)][i]);
    }
    const float got = results[0][i];
    for (int r = 1; r < ranks; ++r)
      unequal += std::memcmp(&results[static_cast<size_t>(r)][i], &got, sizeof got) != 0;
    // One rounding (relative 2^-8, half a bfloat16 ulp) per partial sum sent and one of
    // the result.
    outside += std::abs(got - exact) > magnitude * ranks * std::ldexp(1.0, -8) + 1e-6;
    rounded += got != static_cast<float>(exact);
  }
  CHECK(unequal == 0);
  CHECK(outside == 0);
  if (n > 1000) CHECK(rounded > n / 2);  // the wire did round: this is not float32
  for (int r = 0; r < ranks; ++r) {
    // Data bytes halved; the 64-byte header frame is the same in both.
    CHECK(bf16_bytes[static_cast<size_t>(r)] - 64 <=
          (f32_bytes[static_cast<size_t>(r)] - 64) / 2 + 2);
    CHECK(bf16_bytes[static_cast<size_t>(r)] - 64 + 2 >=
          (f32_bytes[static_cast<size_t>(r)] - 64) / 2);
  }
}

TEST_CASE("ring all-reduce fuses small tensors into buckets", "[ring]") {
  RingOptions o;
  o.fusion_bytes = 1024;  // 256 floats
  on_ranks(3, o, [&](int rank, Ring& ring) {
    std::vector<core::Tensor> ts;
    for (int64_t n : {3, 100, 100, 100, 1000, 7, 0})
      ts.emplace_back(core::Shape{n}, static_cast<float>(rank + 1));
    std::vector<core::TensorView> views;
    for (auto& t : ts)
      views.push_back(t.view());
    REQUIRE(ring.all_reduce(views, Reduction::sum, "grads").ok());
    for (auto& t : ts)
      for (int64_t i = 0; i < t.size(); ++i)
        CHECK(t[i] == 6.0f);
    // Buckets {3, 100, 100} and {100, 7, 0}; the 1000 goes alone, in place.
    CHECK(ring.stats().buckets == 2);
    CHECK(ring.stats().collectives == 3);
  });
}

TEST_CASE("a rank that never submits is named by the stall report", "[ring]") {
  RingOptions o;
  o.timeout = std::chrono::milliseconds(300);
  std::promise<void> given_up;
  auto others_done = given_up.get_future();
  on_ranks(3, o, [&](int rank, Ring& ring) {
    if (rank == 2) {  // never submits; stays until the others have given up
      CHECK(others_done.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
      return;
    }
    std::vector<float> data(1000, 1.0f);
    auto st = ring.all_reduce(data.data(), data.size(), Reduction::sum, "dense/kernel");
    REQUIRE_FALSE(st.ok());
    CHECK(st.error().code == core::Errc::unavailable);
    if (rank == 0) {  // rank 2's right neighbour
      CHECK_THAT(st.error().message, Catch::Contains("rank 2"));
      CHECK_THAT(st.error().message, Catch::Contains("'dense/kernel'"));
      CHECK_THAT(st.error().message, Catch::Contains("not submitted"));
    }
    if (rank == 1) given_up.set_value();
  });
}

TEST_CASE("ranks reducing different tensors get an error naming both", "[ring]") {
  on_ranks(2, {}, [&](int rank, Ring& ring) {
    std::vector<float> data(rank == 0 ? 10 : 12, 1.0f);
    auto st = ring.all_reduce(data.data(), data.size(), Reduction::sum, rank == 0 ? "a" : "b");
    REQUIRE_FALSE(st.ok());
    CHECK(st.error().code == core::Errc::invalid_argument);
    CHECK_THAT(st.error().message, Catch::Contains("'a' (10 floats as float32)"));
    CHECK_THAT(st.error().message, Catch::Contains("'b' (12 floats as float32)"));
  });
}

TEST_CASE("ranks sending different wire types get an error naming both", "[ring][bf16]") {
  on_ranks(2, {}, [&](int rank, Ring& ring) {
    std::vector<float> data(10, 1.0f);
    auto st = ring.all_reduce(data.data(), data.size(), Reduction::sum, "g",
                              rank == 0 ? core::DType::bfloat16 : core::DType::float32);
    REQUIRE_FALSE(st.ok());
    CHECK(st.error().code == core::Errc::invalid_argument);
    CHECK_THAT(st.error().message, Catch::Contains("(10 floats as bfloat16)"));
    CHECK_THAT(st.error().message, Catch::Contains("(10 floats as float32)"));
  });
}

TEST_CASE("a stranger connecting to a rank is refused and the ring still forms", "[ring]") {
  const auto addr = test::loopback_addresses(2);
  std::thread stranger([&] {
    // Knocks on rank 0's port before rank 1 does, with bytes that are no hello.
    for (int i = 0; i < 200; ++i) {
      auto s = net::connect_to("127.0.0.1", static_cast<uint16_t>(std::stoi(addr[0].substr(10))),
                               std::chrono::milliseconds(1000));
      if (!s) {
        std::this_thread::yield();
        continue;
      }
      const char junk[16] = "GET / HTTP/1.0\n";
      ::send(s->fd(), junk, sizeof junk, MSG_NOSIGNAL);
      return;
    }
  });
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.emplace_back([&, r] {
      auto ring = Ring::form(r, addr, {});
      REQUIRE(ring.ok());
      float x = 1.0f;
      REQUIRE((*ring)->all_reduce(&x, 1, Reduction::sum, "x").ok());
      CHECK(x == 2.0f);
    });
  for (auto& t : ranks)
    t.join();
  stranger.join();
}

namespace {

// Rank `rank` of a ring of 2 on `addr`: forms it and sums 1 with the other's 1.
float sum_of_ones(int rank, const std::vector<std::string>& addr, const RingOptions& o) {
  auto ring = Ring::form(rank, addr, o);
  REQUIRE(ring.ok());
  float x = 1.0f;
  REQUIRE((*ring)->all_reduce(&x, 1, Reduction::sum, "x").ok());
  return x;
}

}  // namespace

TEST_CASE("with a cluster secret only members form a ring", "[ring][auth]") {
  const auto addr = test::loopback_addresses(2);
  RingOptions o;
  o.secret = "the job's secret, 32 bytes long!";
  o.connect_timeout = std::chrono::milliseconds(10000);
  // Rank 0 starts alone; an impostor that knows its port but not the secret knocks first
  // and is refused; then rank 1 comes and the ring forms.
  auto rank0 = std::async(std::launch::async, [&] { return sum_of_ones(0, addr, o); });
  core::Status impostor = core::make_error(core::Errc::unavailable, "rank 0 never listened");
  const auto port = static_cast<uint16_t>(std::stoi(addr[0].substr(10)));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    if (auto s = net::connect_to("127.0.0.1", port, std::chrono::milliseconds(1000))) {
      impostor =
          net::authenticate_to(*s, "not the job's secret, also 32 b.", std::chrono::seconds(5));
      break;
    }
    std::this_thread::yield();
  }
  REQUIRE_FALSE(impostor.ok());
  CHECK(impostor.error().code == core::Errc::permission_denied);
  CHECK(sum_of_ones(1, addr, o) == 2.0f);
  CHECK(rank0.get() == 2.0f);

  // Ranks holding different secrets never form one: each refuses the other.
  const auto other = test::loopback_addresses(2);
  RingOptions a = o, b = o;
  a.connect_timeout = b.connect_timeout = std::chrono::milliseconds(1500);
  b.secret = "another job's secret, 32 bytes!";
  auto rank1 = std::async(std::launch::async, [&] { return Ring::form(1, other, b); });
  CHECK_FALSE(Ring::form(0, other, a).ok());
  CHECK_FALSE(rank1.get().ok());
}

// Found from outside: the ring's door took one handshake at a time, waiting 2 s per byte,
// so one stranger dripping a byte now and then kept the left neighbour out and a mirrored
// job failed at start. Its door now holds many handshakes at once, each to a deadline.
TEST_CASE("strangers dripping bytes at a rank's door do not keep its neighbour out",
          "[ring][auth]") {
  const auto addr = test::loopback_addresses(2);
  RingOptions o;
  o.secret = "the job's secret, 32 bytes long!";
  o.connect_timeout = std::chrono::milliseconds(15000);
  auto rank0 = std::async(std::launch::async, [&] { return sum_of_ones(0, addr, o); });
  // Three strangers reach rank 0's door first; each sends a Troupe magic byte by byte,
  // one every 300 ms, and keeps dripping until the ring has formed.
  const auto port = static_cast<uint16_t>(std::stoi(addr[0].substr(10)));
  std::atomic<bool> formed{false};
  std::mutex mu;
  std::condition_variable cv;  // wakes the dripping at once when the ring has formed
  std::vector<net::Socket> strangers;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (strangers.size() < 3 && std::chrono::steady_clock::now() < deadline) {
    if (auto s = net::connect_to("127.0.0.1", port, std::chrono::milliseconds(1000)))
      strangers.push_back(std::move(*s));
    else
      std::this_thread::yield();
  }
  REQUIRE(strangers.size() == 3);
  std::thread drip([&] {
    for (size_t i = 0; !formed; ++i) {
      for (auto& s : strangers)
        ::send(s.fd(), &"TRA1"[i % 4], 1, MSG_NOSIGNAL | MSG_DONTWAIT);
      std::unique_lock<std::mutex> lock(mu);
      cv.wait_for(lock, std::chrono::milliseconds(300), [&] { return formed.load(); });
    }
  });
  auto ring1 = Ring::form(1, addr, o);
  {
    std::lock_guard<std::mutex> lock(mu);
    formed = true;
  }
  cv.notify_all();
  drip.join();
  REQUIRE(ring1.ok());
  float x = 1.0f;
  REQUIRE((*ring1)->all_reduce(&x, 1, Reduction::sum, "x").ok());
  CHECK(x == 2.0f);
  CHECK(rank0.get() == 2.0f);
}

TEST_CASE("a rank that leaves mid-job is reported at once by its neighbours", "[ring]") {
  on_ranks(3, {}, [&](int rank, Ring& ring) {
    std::vector<float> data(100, 1.0f);
    REQUIRE(ring.all_reduce(data.data(), data.size(), Reduction::sum, "step1").ok());
    if (rank == 1) return;  // its Ring closes when the thread's caller destroys it
    auto st = ring.all_reduce(data.data(), data.size(), Reduction::sum, "step2");
    REQUIRE_FALSE(st.ok());
    CHECK(st.error().code == core::Errc::unavailable);
  });
}

TEST_CASE("broadcast copies the root's floats to every rank", "[ring]") {
  const size_t big = (size_t{256} << 10) * 2 + 5;  // more than two pieces
  on_ranks(3, {}, [&](int rank, Ring& ring) {
    for (int root = 0; root < 3; ++root)
      for (size_t n : {size_t{0}, size_t{1}, size_t{1000}, big}) {
        std::vector<float> data(n, -1.0f);
        if (rank == root)
          for (size_t i = 0; i < n; ++i)
            data[i] = value(root, i);
        const auto st = ring.broadcast(data.data(), n, root, "b");
        if (!st) {  // a failure on this thread must not throw out of it
          FAIL_CHECK("rank " << rank << ", root " << root << ", " << n
                             << " floats: " << st.error().to_string());
          return;
        }
        size_t wrong = 0;
        for (size_t i = 0; i < n; ++i)
          wrong += data[i] != value(root, i);
        CHECK(wrong == 0);
      }
    float x = 0;
    auto bad = ring.broadcast(&x, 1, 3, "b");
    REQUIRE_FALSE(bad.ok());
    CHECK(bad.error().code == core::Errc::invalid_argument);
  });
}

TEST_CASE("the ring runs behind the collective interface with a per-call timeout", "[ring]") {
  RingOptions o;
  o.timeout = std::chrono::milliseconds(120000);  // the call's own timeout must win
  std::promise<void> given_up;
  auto done = given_up.get_future();
  const auto addr = test::loopback_addresses(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      auto ring = Ring::form(r, addr, o);
      REQUIRE(ring.ok());
      std::vector<std::unique_ptr<collective::Implementation>> impls;
      impls.push_back(std::make_unique<collective::RingImplementation>(std::move(*ring)));
      collective::Group group(r, 2, collective::Communication::automatic, std::move(impls));
      std::vector<float> a(5, 1.0f), b(70000, 2.0f);
      collective::AllReduceOptions ar;
      ar.inputs = {{a.data(), a.size()}, {b.data(), b.size()}};
      ar.reduction = Reduction::mean;
      ar.tag = "grads";
      REQUIRE(collective::all_reduce(group, ar).ok());
      CHECK(a[4] == 1.0f);
      CHECK(b[69999] == 2.0f);
      if (r == 1) {  // never submits the second one
        CHECK(done.wait_for(std::chrono::seconds(20)) == std::future_status::ready);
        return;
      }
      ar.timeout = std::chrono::milliseconds(200);
      auto st = collective::all_reduce(group, ar);
      REQUIRE_FALSE(st.ok());
      CHECK_THAT(st.error().message, Catch::Contains("waited 200 ms"));
      given_up.set_value();
    });
  for (auto& t : threads)
    t.join();
}

TEST_CASE("a rank that shuts its ring down fails its neighbours at once", "[ring]") {
  RingOptions o;
  o.timeout = std::chrono::milliseconds(120000);  // no timeout may be what ends it
  on_ranks(3, o, [&](int rank, Ring& ring) {
    std::vector<float> data(100, 1.0f);
    REQUIRE(ring.all_reduce(data.data(), data.size(), Reduction::sum, "step1").ok());
    if (rank == 1) {
      ring.shut_down();  // gives up, but the process (thread) stays
      auto st = ring.all_reduce(data.data(), data.size(), Reduction::sum, "step2");
      CHECK_FALSE(st.ok());
      return;
    }
    auto st = ring.all_reduce(data.data(), data.size(), Reduction::sum, "step2");
    REQUIRE_FALSE(st.ok());
    CHECK(st.error().code == core::Errc::unavailable);
  });
}

// A rank that will not share memory (another host, say): its two links fall back to TCP,
// the others keep theirs, and every result is still exact.
TEST_CASE("ranks with and without shared memory reduce exactly in one ring", "[ring]") {
  const auto addr = test::loopback_addresses(3);
  std::vector<int> links(3, -1);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r)
    threads.emplace_back([&, r] {
      RingOptions o;
      o.shared_memory = r != 1;
      auto ring = Ring::form(r, addr, o);
      REQUIRE(ring.ok());
      links[static_cast<size_t>(r)] = (*ring)->stats().shared_memory_links;
      for (size_t n : {size_t{10}, size_t{300001}}) {
        std::vector<float> data(n);
        for (size_t i = 0; i < n; ++i)
          data[i] = value(r, i);
        REQUIRE((*ring)->all_reduce(data.data(), n, Reduction::sum, "mixed").ok());
        size_t wrong = 0;
        for (size_t i = 0; i < n; ++i)
          wrong += data[i] != value(0, i) + value(1, i) + value(2, i);
        CHECK(wrong == 0);
      }
    });
  for (auto& t : threads)
    t.join();
  // Rank 0 sends to 1 over TCP and hears 2 through memory; rank 2 the other way round.
  if (shm_available()) CHECK(links == std::vector<int>{1, 0, 1});
}

TEST_CASE("over TLS the ring sums exactly", "[ring][tls]") {
  net::set_links_encrypted(true);
  RingOptions o;
  o.secret = "the job's secret, 32 bytes long!";
  o.shared_memory = false;  // every byte over TCP
  const std::vector<size_t> sizes{1, 3, 4097, (size_t{1} << 18) + 3, (size_t{5} << 20) + 1};
  on_ranks(3, o, [&](int rank, Ring& ring) {
    CHECK(ring.stats().tls_links == 2);
    for (size_t n : sizes) {
      std::vector<float> data(n);
      for (size_t i = 0; i < n; ++i)
        data[i] = value(rank, i);
      REQUIRE(ring.all_reduce(data.data(), n, Reduction::sum, "t" + std::to_string(n)).ok());
      size_t wrong = 0;
      for (size_t i = 0; i < n; ++i)
        wrong += data[i] != value(0, i) + value(1, i) + value(2, i);
      CHECK(wrong == 0);
    }
  });
  net::set_links_encrypted(false);
}
