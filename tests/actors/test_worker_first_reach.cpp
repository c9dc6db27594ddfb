// A worker's first reach of a PS task that is alive but slow to answer: a PS behind a
// job's start-up storm (hundreds of tasks dialling it on a crowded host) answers its
// first request later than any one ask's bound, while its link stays up.
#include <catch2/catch.hpp>

#include <chrono>
#include <vector>

#include "actor_fixture.hpp"
#include "actors/chief_protocol.hpp"
#include "actors/worker.hpp"

using namespace troupe;
using namespace std::chrono_literals;

namespace {

struct SlowPsState {
  std::vector<caf::response_promise> waiting;  // channel asks, oldest first
  int asks = 0;
  static inline const char* name = "test.slow_ps";
};

// Answers each channel ask `delay` after it came (no tensor channel: port 0), and each
// batch at once with a row of `value`s per item.
caf::behavior slow_ps(caf::stateful_actor<SlowPsState>* self, std::chrono::milliseconds delay,
                      float value) {
  return {
      [=](net::channel_atom) {
        ++self->state.asks;
        self->state.waiting.push_back(self->make_response_promise());
        self->delayed_send(self, delay, net::tick_atom::value);
      },
      [=](net::tick_atom) {
        auto& w = self->state.waiting;
        if (w.empty()) return;
        w.front().deliver(int32_t{0});
        w.erase(w.begin());
      },
      [=](net::batch_atom, net::PsRequest& r) {
        std::vector<net::PsItem> items;
        for (auto& i : r.items)
          items.push_back({i.name, {}, net::WireTensor{{1, 2}, {value, value}}});
        return items;
      },
      [=](net::stats_atom) { return self->state.asks; },
  };
}

}  // namespace

TEST_CASE("A worker's first reach waits for a PS that is alive but slower than one ask",
          "[worker]") {
  test::ActorFixture worker_node, ps_node;
  const auto delay = 1400ms;
  auto ps = ps_node.sys->spawn(slow_ps, delay, 2.5f);
  struct Kill {
    caf::actor a;
    ~Kill() { caf::anon_send_exit(a, caf::exit_reason::kill); }
  } kill{ps};
  auto port = ps_node.sys->middleman().publish(ps, 0, "127.0.0.1", true);
  REQUIRE(port);

  actors::WorkerOptions o;
  o.cluster = net::ClusterSpec({{"ps", {"127.0.0.1:" + std::to_string(*port)}}});
  // Each ask is answered 1.4 s after it comes: longer than the first ask's bound (250 ms)
  // and well within request_timeout (2 s). Asks that go unanswered over a live link move
  // the deadline on and double their bound (250, 500, 1000 ms, then the 2 s left), so the
  // fourth is answered; with a fixed ask bound every ask would time out and the reach
  // would fail at 2 s.
  o.request_timeout = 2000ms;
  o.connect_timeout = 250ms;
  actors::WorkerRuntime runtime(*worker_node.sys, o);
  net::VariableDef def;
  def.name = "v";
  def.shape = {1, 2};
  REQUIRE(runtime.set_placements({{def, 0, {}}}).ok());

  const auto start = std::chrono::steady_clock::now();
  auto pulled = runtime.pull({"v"});
  const auto took = std::chrono::steady_clock::now() - start;
  INFO((pulled ? std::string("pulled") : pulled.error().to_string()));
  REQUIRE(pulled.ok());
  REQUIRE(pulled->size() == 1);
  CHECK((*pulled)[0].size() == 2);
  CHECK((*pulled)[0][0] == 2.5f);
  CHECK(took >= delay);  // it did wait for the slow answer
  // Asked again while it waited, but not every connect_timeout: the bounds doubled.
  caf::scoped_actor self(*ps_node.sys);
  int asks = 0;
  self->request(ps, 10s, net::stats_atom::value)
      .receive([&](int n) { asks = n; }, [](caf::error&) {});
  CHECK(asks >= 2);
  CHECK(asks <= 5);
}
