// The dataset_iterator actor: builds the registered dataset with the worker's
// InputContext, hands batches over in order, reports the end and a failing pipeline, and
// makes batches ahead only up to its prefetch depth.
#include <catch2/catch.hpp>

#include <atomic>
#include <stdexcept>

#include "actor_fixture.hpp"
#include "actors/dataset_iterator.hpp"
#include "net/node.hpp"
#include "net/wire.hpp"

using namespace troupe;
using namespace std::chrono_literals;

namespace {

core::Dataset<core::Example> numbers(int n) {
  std::vector<core::Example> xs(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    xs[static_cast<size_t>(i)].features = {static_cast<float>(i)};
    xs[static_cast<size_t>(i)].label = static_cast<float>(i);
  }
  return core::from_vector(std::move(xs));
}

struct IteratorFixture : test::ActorFixture {
  core::Expected<actors::BatchMsg> next(const caf::actor& a, uint32_t n) {
    core::Expected<actors::BatchMsg> out = core::make_error(core::Errc::internal, "no reply");
    (*self)
        ->request(a, 10s, actors::next_atom::value, n)
        .receive([&](actors::BatchMsg& m) { out = std::move(m); },
                 [&](caf::error& e) { out = net::from_caf(e); });
    return out;
  }
  void stop(const caf::actor& a) { caf::anon_send(a, net::shutdown_atom::value); }
};

}  // namespace

TEST_CASE("A dataset_iterator hands over its worker's shard in order, then the end",
          "[dataset_iterator]") {
  IteratorFixture f;
  actors::DatasetIteratorOptions o;
  o.name = "numbers";
  o.context.num_input_pipelines = 2;
  o.context.input_pipeline_id = 1;
  o.fn = [](const core::InputContext& ctx, const std::vector<char>&) {
    return core::to_batches(numbers(20).shard(ctx.num_input_pipelines, ctx.input_pipeline_id), 3,
                            /*drop_remainder=*/false);
  };
  o.prefetch = 2;
  auto it = f.sys->spawn<caf::detached>(actors::dataset_iterator, o);
  std::vector<float> seen;
  bool ended = false;
  for (int k = 0; k < 10 && !ended; ++k) {
    auto m = f.next(it, 2);
    REQUIRE(m.ok());
    for (const auto& b : m->batches)
      seen.insert(seen.end(), b.labels.begin(), b.labels.end());
    ended = m->ended;
  }
  CHECK(ended);
  CHECK(seen == std::vector<float>{1, 3, 5, 7, 9, 11, 13, 15, 17, 19});  // worker 1 of 2
  auto again = f.next(it, 4);                                            // the end stays the end
  REQUIRE(again.ok());
  CHECK(again->batches.empty());
  CHECK(again->ended);
  f.stop(it);
}

TEST_CASE("A dataset_iterator makes batches ahead up to its prefetch depth only",
          "[dataset_iterator]") {
  IteratorFixture f;
  auto made = std::make_shared<std::atomic<int>>(0);
  actors::DatasetIteratorOptions o;
  o.name = "counted";
  o.fn = [made](const core::InputContext&, const std::vector<char>&) {
    return core::to_batches(numbers(100).repeat().map([made](core::Example e) {
      ++*made;
      return e;
    }),
                            1, true);
  };
  o.prefetch = 3;
  auto it = f.sys->spawn<caf::detached>(actors::dataset_iterator, o);
  REQUIRE(f.next(it, 0).ok());  // built
  // It fills its prefetch buffer on its own; bounded wait for that to happen.
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (made->load() < 3 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::yield();
  CHECK(made->load() == 3);
  // Then it stops until asked: a round trip through its mailbox sees the same count.
  REQUIRE(f.next(it, 0).ok());
  CHECK(made->load() == 3);
  auto m = f.next(it, 2);
  REQUIRE(m.ok());
  CHECK(m->batches.size() == 2);
  CHECK(m->batches[0].labels.front() == 0.0f);
  CHECK(m->batches[1].labels.front() == 1.0f);
  f.stop(it);
}

TEST_CASE("A failing dataset function is an error naming the dataset", "[dataset_iterator]") {
  IteratorFixture f;
  actors::DatasetIteratorOptions o;
  o.name = "broken";
  o.fn = [](const core::InputContext&, const std::vector<char>&) -> core::Dataset<core::Batch> {
    throw std::runtime_error("no such file: /nowhere/train.idx");
  };
  auto it = f.sys->spawn<caf::detached>(actors::dataset_iterator, o);
  auto m = f.next(it, 1);
  REQUIRE_FALSE(m.ok());
  CHECK(m.error().code == core::Errc::internal);
  CHECK_THAT(m.error().message, Catch::Contains("broken") && Catch::Contains("/nowhere"));
  CHECK_FALSE(f.next(it, 0).ok());  // and again: it keeps answering
  f.stop(it);
}
