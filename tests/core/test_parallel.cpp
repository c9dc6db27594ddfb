#include <catch2/catch.hpp>

#include <atomic>
#include <mutex>
#include <set>
#include <thread>

#include "core/keras/ctr_graph.hpp"
#include "core/nn/ctr_model.hpp"
#include "core/parallel.hpp"
#include "helpers.hpp"

using namespace troupe::core;

namespace {

// Sets the pool's size for one test and puts it back to 1.
struct Threads {
  explicit Threads(int n) { set_intra_op_threads(n); }
  ~Threads() { set_intra_op_threads(1); }
};

}  // namespace

TEST_CASE("parallel_for covers every index once, in at most `threads` chunks", "[parallel]") {
  Threads threads(3);
  REQUIRE(intra_op_threads() == 3);
  for (int64_t n : {1, 7, 64, 1000, 100003}) {
    std::vector<std::atomic<int>> seen(static_cast<size_t>(n));
    std::mutex mu;
    std::set<std::thread::id> ids;
    int chunks = 0;
    parallel_for(n, 10, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i)
        seen[static_cast<size_t>(i)]++;
      std::lock_guard<std::mutex> lock(mu);
      ids.insert(std::this_thread::get_id());
      ++chunks;
    });
    for (auto& s : seen)
      CHECK(s == 1);
    CHECK(chunks <= 3);
    CHECK(static_cast<int>(ids.size()) == chunks);
    if (n < 20) CHECK(chunks == 1);  // under two grains: the caller alone
    if (n >= 1000) CHECK(chunks == 3);
  }
  // A parallel_for inside a chunk runs on that chunk's thread.
  std::atomic<int> nested_elsewhere{0};
  parallel_for(300, 10, [&](int64_t, int64_t) {
    const auto me = std::this_thread::get_id();
    parallel_for(100, 1, [&](int64_t, int64_t) {
      if (std::this_thread::get_id() != me) ++nested_elsewhere;
    });
  });
  CHECK(nested_elsewhere == 0);
}

TEST_CASE("DeepFM with two intra-op threads computes what one thread does", "[parallel]") {
  CtrModelConfig cfg;
  cfg.fields = 26;
  cfg.dense = 13;
  cfg.dim = 8;
  cfg.hidden = {64, 64};
  std::vector<Example> ex(512);
  uint64_t state = 7;
  auto next = [&] { return state = state * 6364136223846793005ull + 1442695040888963407ull; };
  for (auto& e : ex) {
    for (int f = 0; f < 26; ++f)
      e.ids.push_back(f * 100 + static_cast<int64_t>(next() >> 33) % 100);
    for (int j = 0; j < 13; ++j)
      e.features.push_back(static_cast<float>(next() >> 40) / (1 << 24));
    e.label = static_cast<float>((next() >> 63) & 1);
  }
  const Batch b = collate(ex);
  std::vector<int64_t> unique;
  std::vector<int32_t> index;
  unique_ids(b.ids, unique, index);
  const Tensor rows = troupe::test::random_tensor(
      Shape{static_cast<int64_t>(unique.size()), cfg.row_width()}, 3, -0.1f, 0.1f);
  const Tensor dlogits = troupe::test::random_tensor(Shape{512, 1}, 4);

  std::vector<Tensor> values;
  uint64_t seed = 5;
  for (const auto& [name, shape] : ctr_dense_variables(cfg))
    values.push_back(troupe::test::random_tensor(shape, ++seed, -0.1f, 0.1f));
  auto run = [&](int threads, std::vector<Tensor>& grads) {
    Threads t(threads);
    keras::CtrGraph m(cfg, 26 * 100, /*keyed=*/false);  // the model ctr_ps trains
    REQUIRE(m.assign(values).ok());
    REQUIRE(m.feed(b).ok());
    REQUIRE(m.ids() == unique);
    REQUIRE(m.give_rows(rows).ok());
    Tensor logits = Tensor::from_view(m.forward(/*training=*/true).value());
    m.backward(dlogits);
    grads.push_back(Tensor::from_view(m.row_grads()));
    for (const auto& g : m.dense_grads())
      grads.push_back(Tensor::from_view(g.second));
    return logits;
  };
  std::vector<Tensor> g1, g2;
  const Tensor l1 = run(1, g1), l2 = run(2, g2);
  for (int64_t i = 0; i < l1.size(); ++i)
    CHECK(l2[i] == Approx(l1[i]).epsilon(1e-5).margin(1e-6));
  REQUIRE(g1.size() == g2.size());
  for (size_t t = 0; t < g1.size(); ++t)
    for (int64_t i = 0; i < g1[t].size(); ++i)
      CHECK(g2[t][i] == Approx(g1[t][i]).epsilon(1e-4).margin(1e-6));
}

TEST_CASE("the pool can be resized between jobs, any number of times", "[parallel]") {
  // New helpers must not take a finished job for a new one (a crash before the fix).
  for (int round = 0; round < 20; ++round) {
    Threads threads(1 + round % 3);
    std::atomic<int64_t> sum{0};
    parallel_for(1000, 10, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i)
        sum += i;
    });
    CHECK(sum == 999 * 1000 / 2);
  }
}
