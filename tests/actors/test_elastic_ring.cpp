// The elastic ring with its slots as threads of this process over loopback TCP: a slot
// that dies (its sockets close, as a killed process's do) is left out of the next
// generation, the survivors carry on from the state of the one with the most steps, and
// a returning process is taken in at a step boundary and brought up to date by broadcast.
#include <atomic>
#include <future>
#include <mutex>
#include <optional>
#include <thread>

#include <catch2/catch.hpp>

#include "actors/collective/elastic_ring.hpp"
#include "helpers.hpp"
#include "net/auth.hpp"
#include "net/channel.hpp"
#include "process.hpp"

using namespace troupe;
using collective::ElasticOptions;
using collective::ElasticRing;
using collective::Membership;
using collective::Reduction;

namespace {

ElasticOptions options() {
  ElasticOptions o;
  o.ring.group_id = 77;
  o.ring.connect_timeout = std::chrono::milliseconds(20000);
  o.rejoin_timeout = std::chrono::milliseconds(5000);
  return o;
}

struct RingOutcome {
  std::vector<float> x;
  int64_t step = 0;
  std::vector<Membership> generations;  // every generation this slot was part of
};

// A toy synchronous training: each step all-reduces a gradient of ones and adds it to the
// state x; at each step boundary slot 0 says whether someone waits to join. A failed
// collective, or a join, re-forms the ring; the state then comes from the root. With
// `until_size`, training goes on past `steps` until the ring has that many members again
// (every member sees the same step and membership, so all stop together), up to 100x.
RingOutcome train(const std::vector<std::string>& addr, int slot, const ElasticOptions& o,
                  int64_t steps, int64_t die_at, std::promise<void>* reformed_without_me = nullptr,
                  std::promise<void>* died = nullptr, int until_size = 0) {
  RingOutcome out;
  out.x.assign(1000, 0.0f);
  auto g = ElasticRing::join(slot, addr, o, 0, /*has_state=*/false);
  if (!g) {  // a failure on this thread must not throw out of it
    FAIL_CHECK("slot " << slot << " could not join: " << g.error().to_string());
    return out;
  }
  ElasticRing& group = **g;
  auto adopt = [&](const Membership& m) {
    out.generations.push_back(m);
    REQUIRE(group.ring().broadcast(out.x.data(), out.x.size(), m.root, "state").ok());
    out.step = m.step;
  };
  adopt(group.membership());
  bool told = false;
  while (out.step < steps || (group.size() < until_size && out.step < 100 * steps)) {
    if (out.step == die_at) {
      if (died) died->set_value();
      return out;  // the group is destroyed: every socket of this slot closes
    }
    std::vector<float> grad(out.x.size(), 1.0f);
    bool ok = group.ring().all_reduce(grad.data(), grad.size(), Reduction::sum, "grad").ok();
    float waiting = 0;
    if (ok) {
      for (size_t i = 0; i < out.x.size(); ++i)
        out.x[i] += grad[i];
      ++out.step;
      waiting = slot == 0 ? static_cast<float>(group.waiting()) : 0.0f;
      ok = group.ring().all_reduce(&waiting, 1, Reduction::sum, "waiting").ok();
    }
    if (!ok || waiting > 0) {
      auto m = group.reform(out.step);
      REQUIRE(m.ok());
      adopt(*m);
      if (reformed_without_me && !told && m->slots.size() == 2) {
        told = true;
        reformed_without_me->set_value();
      }
    }
  }
  return out;
}

// Three slots formed; then slot 2's process dies and a new process for slot 2 (at `step`)
// knocks, waiting on `joiner` to be taken in. On return slot 0 sees it waiting.
struct Replaced {
  std::unique_ptr<ElasticRing> g0, g1, again;
  std::thread joiner;
};
void replace_slot_2(const std::vector<std::string>& addr, const ElasticOptions& o, int64_t step,
                    Replaced& r) {
  std::unique_ptr<ElasticRing> g2;
  {
    std::thread t1([&] { r.g1 = std::move(ElasticRing::join(1, addr, o, 0, false).value()); });
    std::thread t2([&] { g2 = std::move(ElasticRing::join(2, addr, o, 0, false).value()); });
    r.g0 = std::move(ElasticRing::join(0, addr, o, 0, false).value());
    t1.join();
    t2.join();
  }
  g2.reset();  // the old process of slot 2 is gone
  r.joiner = std::thread(
      [&, step] { r.again = std::move(ElasticRing::join(2, addr, o, step, false).value()); });
  // Bounded wait until the new process's knock is at slot 0.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (r.g0->waiting() == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::yield();
  REQUIRE(r.g0->waiting() == 1);
}

}  // namespace

TEST_CASE("the elastic ring re-forms without a slot that dies and takes it back", "[elastic]") {
  const auto addr = test::loopback_addresses(3);
  const auto o = options();
  std::promise<void> reformed, died;
  auto reformed_f = reformed.get_future();
  auto died_f = died.get_future();
  RingOutcome out0, out1, out2;
  // The survivors go on until slot 2 is back (however slowly it comes, under load).
  std::thread t0([&] { out0 = train(addr, 0, o, 400, -1, &reformed, nullptr, 3); });
  std::thread t1([&] { out1 = train(addr, 1, o, 400, -1, nullptr, nullptr, 3); });
  std::thread t2([&] {
    train(addr, 2, o, 400, 20, nullptr, &died);  // first life: gone at step 20
    // Comes back as a fresh process once the others run without it.
    if (reformed_f.wait_for(std::chrono::seconds(30)) != std::future_status::ready) {
      FAIL_CHECK("the survivors never re-formed");
      return;
    }
    out2 = train(addr, 2, o, 400, -1, nullptr, nullptr, 3);
  });
  t0.join();
  t1.join();
  t2.join();

  // Generation 0: all three; then the two survivors; then all three again.
  REQUIRE(out0.generations.size() >= 3);
  CHECK(out0.generations[0].slots == std::vector<int>{0, 1, 2});
  CHECK(out0.generations[1].slots == std::vector<int>{0, 1});
  CHECK(out0.generations[1].lost == std::vector<int>{2});
  CHECK(out0.generations[1].step == 20);
  CHECK(out0.generations.back().slots == std::vector<int>{0, 1, 2});
  CHECK(out0.generations.back().joined == std::vector<int>{2});
  // The returning slot started from the others' state, not from zero.
  REQUIRE_FALSE(out2.generations.empty());
  CHECK(out2.generations.front().step > 20);
  // Everyone ends at the same step with the same state.
  CHECK(out0.step >= 400);
  CHECK(out1.step == out0.step);
  CHECK(out2.step == out0.step);
  CHECK(out0.x == out1.x);
  CHECK(out0.x == out2.x);
  // 20 steps of three, then at least one of two, then three again: more than 2 per step.
  const auto steps = static_cast<float>(out0.step);
  CHECK(out0.x[0] > 2.0f * steps);
  CHECK(out0.x[0] < 3.0f * steps);
}

TEST_CASE("the elastic ring stops below its minimum and names what is left", "[elastic]") {
  const auto addr = test::loopback_addresses(2);
  auto o = options();
  o.min_ranks = 2;
  std::thread t1([&] {
    auto g = ElasticRing::join(1, addr, o, 0, false);
    REQUIRE(g.ok());
  });  // leaves at once
  auto g = ElasticRing::join(0, addr, o, 0, false);
  REQUIRE(g.ok());
  t1.join();
  float x = 1;
  CHECK_FALSE((*g)->ring().all_reduce(&x, 1, Reduction::sum, "x").ok());
  auto m = (*g)->reform(1);
  REQUIRE_FALSE(m.ok());
  CHECK_THAT(m.error().message, Catch::Contains("1 ranks left") && Catch::Contains("lost 1") &&
                                    Catch::Contains("minimum of 2"));
}

TEST_CASE("slots that never come are named when the first ring cannot form", "[elastic]") {
  const auto addr = test::loopback_addresses(3);
  auto o = options();
  o.ring.connect_timeout = std::chrono::milliseconds(300);
  std::string follower_error;
  std::thread t1([&] {
    auto g = ElasticRing::join(1, addr, o, 0, false);
    REQUIRE_FALSE(g.ok());
    follower_error = g.error().message;
  });
  auto g = ElasticRing::join(0, addr, o, 0, false);  // slot 2 never starts
  t1.join();
  REQUIRE_FALSE(g.ok());
  CHECK_THAT(g.error().message, Catch::Contains("slots 2 did not join"));
  CHECK_THAT(follower_error, Catch::Contains("slots 2 did not join"));
}

// How Python's Ctrl-C ends a MultiWorkerMirroredStrategy whose ring is still forming. Each
// slot waits up to 20 s for the others; stopped, it gives up with `cancelled` at once.
TEST_CASE("a slot told to stop while the first ring forms gives up", "[elastic]") {
  using Joined = core::Expected<std::unique_ptr<ElasticRing>>;
  // `slot` of 2, the other never coming: stopped after it has been asked a few times.
  auto alone = [](int slot) {
    const auto addr = test::loopback_addresses(2);
    auto o = options();
    int asked = 0;
    o.stop = [&] { return ++asked > 5; };
    auto g = ElasticRing::join(slot, addr, o, 0, false);
    REQUIRE_FALSE(g.ok());
    CHECK(g.error().code == core::Errc::cancelled);
    CHECK_THAT(g.error().message,
               Catch::Contains("slot " + std::to_string(slot) + " stopped while joining"));
  };
  SECTION("slot 0 waiting for the others' knocks") {
    alone(0);
  }
  SECTION("a slot knocking at a slot 0 that is not there") {
    alone(1);
  }
  SECTION("slot 0, with a slot that came waiting for its plan: that slot is told why") {
    const auto addr = test::loopback_addresses(3);  // slot 2 never comes
    std::atomic<int> follower_asked{0};
    auto o0 = options(), o1 = options();
    o1.stop = [&] {  // asked while it waits for the plan (and after a failed knock)
      ++follower_asked;
      return false;
    };
    o0.stop = [&] { return follower_asked.load() >= 100; };  // after about 5 s of that
    std::optional<Joined> g0;
    std::thread t0([&] { g0.emplace(ElasticRing::join(0, addr, o0, 0, false)); });
    // Slot 1 starts once slot 0's door is open (bounded), so its first knock is taken.
    const auto port0 = static_cast<uint16_t>(std::stoi(addr[0].substr(addr[0].rfind(':') + 1)));
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!test::listening_ports(::getpid()).count(port0) &&
           std::chrono::steady_clock::now() < deadline)
      std::this_thread::yield();
    auto g1 = ElasticRing::join(1, addr, o1, 0, false);
    t0.join();
    REQUIRE(g0.has_value());
    REQUIRE_FALSE(g0->ok());
    CHECK(g0->error().code == core::Errc::cancelled);
    REQUIRE_FALSE(g1.ok());
    CHECK_THAT(g1.error().message, Catch::Contains("slot 0 stopped while the ring formed"));
  }
}

TEST_CASE("with a cluster secret only members join the elastic ring", "[elastic][auth]") {
  const auto addr = test::loopback_addresses(2);
  auto o = options();
  o.ring.secret = "the job's secret, 32 bytes long!";
  // A stranger with the wrong secret knocks on slot 0 and is refused...
  auto stranger = std::async(std::launch::async, [&] {
    const auto port = static_cast<uint16_t>(std::stoi(addr[0].substr(10)));
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < deadline) {
      if (auto s = net::connect_to("127.0.0.1", port, std::chrono::milliseconds(1000)))
        return net::authenticate_to(*s, "not the job's secret, also 32 b.",
                                    std::chrono::seconds(5));
      std::this_thread::yield();
    }
    return core::Status(core::make_error(core::Errc::unavailable, "slot 0 never listened"));
  });
  // ...while the members form their ring and reduce.
  auto t1 = std::async(std::launch::async, [&] {
    auto g = ElasticRing::join(1, addr, o, 0, false);
    REQUIRE(g.ok());
    float x = 1.0f;
    REQUIRE((*g)->ring().all_reduce(&x, 1, Reduction::sum, "x").ok());
    return x;
  });
  auto g = ElasticRing::join(0, addr, o, 0, false);
  REQUIRE(g.ok());
  float x = 1.0f;
  REQUIRE((*g)->ring().all_reduce(&x, 1, Reduction::sum, "x").ok());
  CHECK(x == 2.0f);
  CHECK(t1.get() == 2.0f);
  auto refused = stranger.get();
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().code == core::Errc::permission_denied);

  // A slot with another secret cannot join slot 0's ring.
  const auto other = test::loopback_addresses(2);
  auto a = options(), b = options();
  a.ring.secret = o.ring.secret;
  b.ring.secret = "another job's secret, 32 bytes!";
  a.ring.connect_timeout = b.ring.connect_timeout = std::chrono::milliseconds(1000);
  b.rejoin_timeout = std::chrono::milliseconds(500);
  auto outsider =
      std::async(std::launch::async, [&] { return ElasticRing::join(1, other, b, 0, false).ok(); });
  CHECK_FALSE(ElasticRing::join(0, other, a, 0, false).ok());
  CHECK_FALSE(outsider.get());
}

TEST_CASE("a member learns at once that slot 0 is gone", "[elastic]") {
  const auto addr = test::loopback_addresses(2);
  const auto o = options();
  std::thread t0([&] {
    auto g = ElasticRing::join(0, addr, o, 0, false);
    REQUIRE(g.ok());
  });  // slot 0 leaves at once
  auto g = ElasticRing::join(1, addr, o, 0, false);
  REQUIRE(g.ok());
  t0.join();
  float x = 1;
  CHECK_FALSE((*g)->ring().all_reduce(&x, 1, Reduction::sum, "x").ok());
  auto m = (*g)->reform(0);
  REQUIRE_FALSE(m.ok());
  CHECK_THAT(m.error().message, Catch::Contains("slot 0"));
}

// A member's process dies and a new one for its slot knocks before the others re-form:
// the slots are the same as before, but the slot is counted lost and joined, by slot 0 and
// by the other members (the plan names it).
TEST_CASE("a slot whose process was replaced before the re-forming counts as lost and joined",
          "[elastic]") {
  const auto addr = test::loopback_addresses(3);
  const auto o = options();
  Replaced r;
  replace_slot_2(addr, o, 5, r);
  auto& g0 = r.g0;
  auto& g1 = r.g1;
  auto& again = r.again;
  core::Expected<Membership> m1 = core::make_error(core::Errc::internal, "not run");
  std::thread t1([&] { m1 = g1->reform(5); });
  auto m0 = g0->reform(5);
  t1.join();
  r.joiner.join();
  REQUIRE(m0.ok());
  REQUIRE(m1.ok());
  REQUIRE(again);
  for (const auto* m : {&*m0, &*m1}) {
    CHECK(m->slots == std::vector<int>{0, 1, 2});
    CHECK(m->lost == std::vector<int>{2});
    CHECK(m->joined == std::vector<int>{2});
  }
  float x = 1.0f;
  std::thread t3([&] { CHECK(again->ring().all_reduce(&x, 1, Reduction::sum, "x").ok()); });
  float y = 1.0f, z = 1.0f;
  std::thread t4([&] { CHECK(g1->ring().all_reduce(&y, 1, Reduction::sum, "x").ok()); });
  CHECK(g0->ring().all_reduce(&z, 1, Reduction::sum, "x").ok());
  t3.join();
  t4.join();
  CHECK(z == 3.0f);
}

// fit() keeps joiners out of the step boundaries after which the members run collectives
// of their own: a re-forming told not to admit leaves the knocking process waiting, and the
// next one that admits takes it in.
TEST_CASE("a re-forming that does not admit leaves a joiner waiting for the next one",
          "[elastic]") {
  const auto addr = test::loopback_addresses(3);
  const auto o = options();
  Replaced r;
  replace_slot_2(addr, o, 0, r);  // slot 2's process dies, a new one knocks
  auto& g0 = r.g0;
  auto& g1 = r.g1;
  auto reform_both = [&](bool admit) {
    auto f1 = std::async(std::launch::async, [&] { return g1->reform(7, admit); });
    auto m0 = g0->reform(7, admit);
    auto m1 = f1.get();
    REQUIRE(m0.ok());
    REQUIRE(m1.ok());
    CHECK(m1->slots == m0->slots);
    return *m0;
  };
  const auto without = reform_both(false);
  CHECK(without.slots == std::vector<int>{0, 1});
  CHECK(without.lost == std::vector<int>{2});
  CHECK(without.joined.empty());
  CHECK(g0->waiting() == 1);  // still knocking
  const auto with = reform_both(true);
  r.joiner.join();
  REQUIRE(r.again);
  CHECK(with.slots == std::vector<int>{0, 1, 2});
  CHECK(with.joined == std::vector<int>{2});
  CHECK(r.again->membership().generation == with.generation);
  CHECK(g0->waiting() == 0);
}

TEST_CASE("the stall report names every rank that has not submitted the collective",
          "[elastic][stall]") {
  const auto addr = test::loopback_addresses(4);
  auto o = options();
  o.ring.secret = "the job's secret, 32 bytes long!";  // the status knocks prove it too
  o.ring.timeout = std::chrono::milliseconds(400);
  std::promise<void> both_failed;
  auto reported = both_failed.get_future().share();
  std::atomic<int> failures{0};
  std::mutex mu;
  std::vector<std::string> reports(4);
  std::vector<std::thread> slots;
  for (int slot = 0; slot < 4; ++slot)
    slots.emplace_back([&, slot] {
      auto g = ElasticRing::join(slot, addr, o, 0, false);
      if (!g) {
        FAIL_CHECK("slot " << slot << ": " << g.error().to_string());
        return;
      }
      std::vector<float> x(1000, 1.0f);
      if (!(*g)->ring().all_reduce(x.data(), x.size(), Reduction::sum, "grad 6").ok()) {
        FAIL_CHECK("slot " << slot << ": the first collective failed");
        return;
      }
      if (slot >= 2) {  // never submits "grad 7"; stays (answering) until the others gave up
        if (reported.wait_for(std::chrono::seconds(20)) != std::future_status::ready)
          FAIL_CHECK("slot " << slot << ": the others never gave up");
        return;
      }
      auto st = (*g)->ring().all_reduce(x.data(), x.size(), Reduction::sum, "grad 7");
      {
        std::lock_guard<std::mutex> lock(mu);
        reports[static_cast<size_t>(slot)] = st.ok() ? "ok" : st.error().to_string();
      }
      if (++failures == 2) both_failed.set_value();
      // Stays until both have their reports: each one asks the other too.
      (void)reported.wait_for(std::chrono::seconds(20));
    });
  for (auto& t : slots)
    t.join();
  // Rank 1 waits on rank 0, which may give up first and close the ring: then rank 1's
  // error is that. Rank 0 waits on rank 3, which never sends: its report is the stall's.
  CHECK_THAT(reports[1], Catch::StartsWith("unavailable"));
  {
    const auto& r = reports[0];
    CAPTURE(r);
    CHECK_THAT(r, Catch::StartsWith("unavailable: ring stall"));
    CHECK_THAT(r, Catch::Contains("Missing: ranks 2, 3."));
    CHECK_THAT(r, Catch::Contains("rank 2 (slot 2): has not submitted it, in no collective "
                                  "(its last, 'grad 6', ended"));
    CHECK_THAT(r, Catch::Contains("rank 3 (slot 3): has not submitted it"));
    CHECK_THAT(r, Catch::Contains("rank 0 (slot 0): submitted it"));
    CHECK_THAT(r, Catch::Contains("rank 1 (slot 1): submitted it"));
  }
}
