#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <numeric>

#include "core/data/dataset.hpp"
#include "core/data/input_context.hpp"

using namespace troupe::core;

namespace {

std::vector<int> range(int n) {
  std::vector<int> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

template <class T>
std::vector<T> drain(const Dataset<T>& ds, size_t limit = 1000000) {
  std::vector<T> out;
  auto it = ds.make_iterator();
  while (out.size() < limit) {
    auto x = it->next();
    if (!x) break;
    out.push_back(std::move(*x));
  }
  return out;
}

}  // namespace

TEST_CASE("shard takes every n-th element", "[dataset]") {
  auto ds = from_vector(range(10));
  CHECK(drain(ds.shard(3, 1)) == std::vector<int>{1, 4, 7});
  CHECK(drain(ds.shard(3, 0)) == std::vector<int>{0, 3, 6, 9});
}

TEST_CASE("shuffle is a seeded permutation that changes each epoch", "[dataset]") {
  auto ds = from_vector(range(100)).shuffle(30, 42);
  auto a = drain(ds);
  auto b = drain(ds);
  auto sorted = a;
  std::sort(sorted.begin(), sorted.end());
  CHECK(sorted == range(100));
  CHECK(a != range(100));
  CHECK(a != b);  // reshuffled for the second iterator
  auto again = drain(from_vector(range(100)).shuffle(30, 42));
  CHECK(again == a);  // same seed, same first epoch
  auto fixed = from_vector(range(100)).shuffle(30, 42, /*reshuffle_each_iteration=*/false);
  CHECK(drain(fixed) == drain(fixed));
}

TEST_CASE("batch, take and repeat", "[dataset]") {
  auto ds = from_vector(range(7));
  auto batches = drain(ds.batch(3));
  REQUIRE(batches.size() == 3);
  CHECK(batches[2] == std::vector<int>{6});
  CHECK(drain(ds.batch(3, /*drop_remainder=*/true)).size() == 2);
  CHECK(drain(ds.repeat(3)).size() == 21);
  CHECK(drain(ds.repeat().take(50)).size() == 50);
  CHECK(drain(from_vector(std::vector<int>{}).repeat()).empty());  // no endless loop
}

TEST_CASE("map transforms and cache replays the first pass", "[dataset]") {
  auto calls = std::make_shared<std::atomic<int>>(0);
  auto ds = from_vector(range(5)).map([calls](int x) {
    ++*calls;
    return x * 10;
  });
  auto cached = ds.cache();
  CHECK(drain(cached) == std::vector<int>{0, 10, 20, 30, 40});
  CHECK(*calls == 5);
  CHECK(drain(cached) == std::vector<int>{0, 10, 20, 30, 40});
  CHECK(*calls == 5);  // the second pass came from the cache
}

TEST_CASE("prefetch keeps order and stops cleanly mid-stream", "[dataset]") {
  auto ds = from_vector(range(1000)).map([](int x) { return x + 1; });
  CHECK(drain(ds.prefetch(4)) == drain(ds));
  // Destroying an iterator over an endless dataset must not hang.
  auto endless = ds.repeat().prefetch(2);
  CHECK(drain(endless, 10).size() == 10);
}

TEST_CASE("to_batches collates dense and sparse features", "[dataset]") {
  std::vector<Example> ex(3);
  for (int i = 0; i < 3; ++i) {
    ex[static_cast<size_t>(i)].features = {static_cast<float>(i), static_cast<float>(i) + 0.5f};
    ex[static_cast<size_t>(i)].ids = std::vector<int64_t>(static_cast<size_t>(i), 7);
    ex[static_cast<size_t>(i)].label = static_cast<float>(i);
  }
  auto batches = drain(to_batches(from_vector(ex), 2, false));
  REQUIRE(batches.size() == 2);
  const Batch& b = batches[0];
  CHECK(b.features.shape() == (Shape{2, 2}));
  CHECK(b.features[3] == 1.5f);
  CHECK(b.classes == std::vector<int32_t>{0, 1});
  CHECK(b.row_splits == std::vector<int64_t>{0, 0, 1});
  CHECK(b.values == std::vector<float>{1.0f});
  CHECK(batches[1].size() == 1);
}

TEST_CASE("InputContext splits the global batch", "[dataset]") {
  InputContext ctx{2, 1, 4};
  CHECK(ctx.per_replica_batch_size(128).value() == 32);
  auto bad = ctx.per_replica_batch_size(130);
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.error().message, Catch::Contains("130"));
}
