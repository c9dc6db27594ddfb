#include <catch2/catch.hpp>

#include <random>
#include <set>
#include <unordered_map>

#include "core/dynamic_table.hpp"

using namespace troupe::core;

namespace {

DynamicTableOptions options(int64_t width) {
  DynamicTableOptions o;
  o.width = width;
  o.init = Initializer{Initializer::Kind::random_uniform, 0.05f, 7};
  return o;
}

DynamicTable table(const DynamicTableOptions& o, const std::string& optimizer = "sgd",
                   float lr = 0.5f) {
  REQUIRE(o.check().ok());
  return DynamicTable(o, make_optimizer(optimizer, lr).value());
}

Tensor grads_of(const std::vector<int64_t>& keys, int64_t width, float g = 1.0f) {
  Tensor t(Shape{static_cast<int64_t>(keys.size()), width});
  for (int64_t i = 0; i < t.size(); ++i)
    t.data()[i] = g;
  return t;
}

// n keys: first, first + step, ...
std::vector<int64_t> key_range(size_t n, int64_t first, int64_t step = 1) {
  std::vector<int64_t> keys(n);
  for (size_t i = 0; i < n; ++i)
    keys[i] = first + static_cast<int64_t>(i) * step;
  return keys;
}

std::vector<float> read(const DynamicTable& t, int64_t key) {
  std::vector<float> out(static_cast<size_t>(t.width()));
  t.lookup(&key, 1, out.data());
  return out;
}

}  // namespace

TEST_CASE("A dynamic table's index finds every live key through inserts and erases") {
  // Many inserts and erases against a std::unordered_map: growth of the index and the
  // backward-shift deletion must leave every live key found, with its own row, and no
  // erased key found.
  auto o = options(2);
  auto t = table(o);
  std::unordered_map<int64_t, float> model;
  std::mt19937_64 rng(3);
  for (int op = 0; op < 60000; ++op) {
    // Keys from a small range so that erases hit live keys and probe runs collide.
    const auto key = static_cast<int64_t>(rng() % 20000) * 7919 - 50000;
    if (rng() % 3 == 0) {
      t.erase(key);
      model.erase(key);
    } else {
      const float data[4] = {static_cast<float>(op), 0, 0, 0};
      REQUIRE(t.insert(key, data, 1, 0).ok());
      model[key] = static_cast<float>(op);
    }
  }
  REQUIRE(t.rows() == static_cast<int64_t>(model.size()));
  for (const auto& [key, v] : model) {
    const float* row = t.row(key);
    REQUIRE(row != nullptr);
    REQUIRE(row[0] == v);
  }
  for (int64_t k = -50000; k < 20000 * 7919; k += 7919 * 13)
    if (!model.count(k)) REQUIRE_FALSE(t.contains(k));
  int64_t seen = 0;
  t.for_each([&](const DynamicRow& r) {
    REQUIRE(model.count(r.key) == 1);
    ++seen;
  });
  REQUIRE(seen == t.rows());
}

TEST_CASE("A dynamic table admits a key at its min_count-th occurrence") {
  auto o = options(3);
  o.min_count = 3;
  o.sketch_width = 1 << 12;
  auto t = table(o);
  const std::vector<int64_t> keys{42, -9};
  // Unknown keys read as zeros; their gradients are dropped and counted.
  for (int i = 0; i < 2; ++i) {
    REQUIRE(t.apply(keys, grads_of(keys, 3)).ok());
    REQUIRE(t.rows() == 0);
    REQUIRE(read(t, 42) == std::vector<float>(3, 0.0f));
  }
  REQUIRE(t.counters().grads_dropped == 4);
  REQUIRE(t.apply(keys, grads_of(keys, 3)).ok());
  REQUIRE(t.rows() == 2);
  REQUIRE(t.counters().admitted == 2);
  // Admitted with its initial value, then one SGD step (lr 0.5, gradient 1).
  DynamicTable fresh = table(options(3));
  const std::vector<int64_t> one{42};
  REQUIRE(fresh.apply(one, grads_of(one, 3, 0.0f)).ok());  // the initial value, unchanged
  const auto initial = read(fresh, 42);
  const auto after = read(t, 42);
  for (size_t j = 0; j < 3; ++j) {
    REQUIRE(initial[j] != 0.0f);
    REQUIRE(std::abs(initial[j]) <= 0.05f);
    REQUIRE(after[j] == Approx(initial[j] - 0.5f));
  }
  // The sketch's memory is what it says: depth x width 16-bit counters.
  REQUIRE(t.memory_bytes() >= 4 * (1 << 12) * 2);
  REQUIRE(fresh.memory_bytes() < t.memory_bytes());
}

TEST_CASE("A dynamic table admits with a probability when one is given") {
  auto o = options(1);
  o.admit_probability = 0.25f;
  auto t = table(o);
  const auto keys = key_range(4000, 0, 31);
  REQUIRE(t.apply(keys, grads_of(keys, 1)).ok());
  // Binomial(4000, 0.25): mean 1000, sd 27.
  REQUIRE(t.rows() > 850);
  REQUIRE(t.rows() < 1150);
  REQUIRE(t.counters().grads_dropped == 4000 - t.rows());
}

TEST_CASE("A dynamic table's rows start from a value that depends only on the key") {
  auto a = table(options(4)), b = table(options(4));
  const std::vector<int64_t> k1{5, 6, 7}, k2{7, 1000, 5};
  REQUIRE(a.apply(k1, grads_of(k1, 4, 0.0f)).ok());
  REQUIRE(b.apply(k2, grads_of(k2, 4, 0.0f)).ok());
  REQUIRE(read(a, 5) == read(b, 5));
  REQUIRE(read(a, 7) == read(b, 7));
  REQUIRE(read(a, 5) != read(a, 6));
}

TEST_CASE("A dynamic table updates its rows as the same optimizer updates a fixed table") {
  // Adagrad, Adam (lazy) and FTRL on keyed rows against apply_sparse on a dense table
  // holding the same rows: equal, repeated keys summed. Odd steps send each key once in
  // increasing order (as a worker does: taken as they come), even steps repeat keys out
  // of order (sorted and merged first).
  for (const std::string name : {"adagrad", "adam", "ftrl"}) {
    auto o = options(3);
    o.init = Initializer{Initializer::Kind::constant, 0.1f, 0};
    auto t = table(o, name, 0.05f);
    auto opt = make_optimizer(name, 0.05f).value();
    Tensor dense(Shape{4, 3});
    for (int64_t i = 0; i < dense.size(); ++i)
      dense.data()[i] = 0.1f;
    SlotSet slots = opt->make_slots(dense.shape());
    const std::vector<int64_t> key_of{1000, -7, 1ll << 60, 3};  // dense row i holds key_of[i]
    std::mt19937 rng(1);
    std::normal_distribution<float> n01;
    for (int step = 0; step < 20; ++step) {
      std::vector<int64_t> rows{static_cast<int64_t>(step % 4), 2, static_cast<int64_t>(step % 4)};
      if (step % 2 == 1) rows = {1, 3, 0, 2};  // keys -7, 3, 1000, 2^60
      std::vector<int64_t> keys;
      for (int64_t r : rows)
        keys.push_back(key_of[static_cast<size_t>(r)]);
      Tensor g(Shape{static_cast<int64_t>(rows.size()), 3});
      for (int64_t i = 0; i < g.size(); ++i)
        g.data()[i] = n01(rng);
      REQUIRE(t.apply(keys, g).ok());
      REQUIRE(opt->apply_sparse(dense, rows, g, slots).ok());
    }
    for (size_t r = 0; r < 4; ++r) {
      const auto row = read(t, key_of[r]);
      for (int64_t j = 0; j < 3; ++j)
        REQUIRE(row[static_cast<size_t>(j)] ==
                Approx(dense.data()[static_cast<int64_t>(r) * 3 + j]).margin(1e-6));
    }
  }
}

TEST_CASE("A dynamic table evicts rows not updated for ttl_steps") {
  auto o = options(2);
  o.ttl_steps = 10;
  auto t = table(o);
  const auto cold = key_range(100, 1'000'000);
  REQUIRE(t.apply(cold, grads_of(cold, 2)).ok());
  REQUIRE(t.rows() == 100);
  const std::vector<int64_t> hot{1, 2};
  // The sweep examines at least 64 rows a step: within ttl + 2 sweeps every cold row is
  // gone and the hot ones, updated every step, stay.
  for (int step = 0; step < 14; ++step)
    REQUIRE(t.apply(hot, grads_of(hot, 2)).ok());
  REQUIRE(t.rows() == 2);
  REQUIRE(t.contains(1));
  REQUIRE(t.contains(2));
  REQUIRE(t.counters().evicted_ttl == 100);
  REQUIRE_FALSE(t.contains(1'000'000));
  REQUIRE(read(t, 1'000'000) == std::vector<float>(2, 0.0f));
}

TEST_CASE("A dynamic table never holds more than max_rows and keeps its frequent keys") {
  auto o = options(2);
  o.max_rows = 500;
  auto t = table(o);
  const auto hot = key_range(50, 0);
  int64_t next = 1000;
  for (int step = 0; step < 400; ++step) {
    std::vector<int64_t> keys = hot;  // 50 frequent keys every step, 20 new ones
    for (int i = 0; i < 20; ++i)
      keys.push_back(next++);
    REQUIRE(t.apply(keys, grads_of(keys, 2)).ok());
    REQUIRE(t.rows() <= 500);
  }
  REQUIRE(t.rows() == 500);
  REQUIRE(t.counters().evicted_cap == 50 + 400 * 20 - 500);
  for (int64_t k : hot)
    REQUIRE(t.contains(k));
  // Restoring beyond the cap is refused, naming it.
  const std::vector<float> row(static_cast<size_t>(t.stride()), 0.0f);
  auto refused = t.insert(-1, row.data(), 1, 0);
  REQUIRE_FALSE(refused.ok());
  REQUIRE(refused.error().message.find("max_rows") != std::string::npos);
}

TEST_CASE("A dynamic table at its cap does not evict the rows its own step updates") {
  // 64 rows at the cap: keys 9..64 updated often, 1..8 once. A step of 4 new keys (smaller
  // than every old one, so admitted before the old keys' rows are reached) and keys 1..8:
  // the rarest rows are 1..8, but they are this step's, so the 4 rows made room for come
  // from 9..64, and 1..8 get this step's gradient on top of their first.
  auto o = options(1);
  o.max_rows = 64;
  auto t = table(o, "sgd", 0.5f);
  const auto all = key_range(64, 1);
  REQUIRE(t.apply(all, grads_of(all, 1)).ok());
  const auto frequent = key_range(56, 9);
  for (int i = 0; i < 4; ++i)
    REQUIRE(t.apply(frequent, grads_of(frequent, 1)).ok());
  const auto before = read(t, 1)[0];
  std::vector<int64_t> keys{-4, -3, -2, -1};
  for (int64_t k = 1; k <= 8; ++k)
    keys.push_back(k);
  REQUIRE(t.apply(keys, grads_of(keys, 1)).ok());
  REQUIRE(t.rows() == 64);
  REQUIRE(t.counters().evicted_cap == 4);
  REQUIRE(t.counters().grads_dropped == 0);
  for (int64_t k = -4; k <= 8; ++k)
    REQUIRE(t.contains(k) == (k != 0));
  REQUIRE(read(t, 1)[0] == Approx(before - 0.5f));
  int gone = 0;
  for (int64_t k : frequent)
    gone += !t.contains(k);
  REQUIRE(gone == 4);
}

TEST_CASE("A dynamic table lists the rows touched and the keys evicted since it was told") {
  auto o = options(1);
  o.ttl_steps = 1;
  auto t = table(o);
  const std::vector<int64_t> a{1, 2, 3};
  REQUIRE(t.apply(a, grads_of(a, 1)).ok());  // not tracking: nothing listed
  REQUIRE(t.touched() == 0);
  t.track_touched(true);
  const std::vector<int64_t> b{3, 4};
  REQUIRE(t.apply(b, grads_of(b, 1)).ok());
  REQUIRE(t.apply(b, grads_of(b, 1)).ok());  // 1 and 2 are now 2 steps old: evicted
  std::set<int64_t> touched;
  t.for_each_touched([&](const DynamicRow& r) { touched.insert(r.key); });
  REQUIRE(touched == std::set<int64_t>{3, 4});
  REQUIRE(std::set<int64_t>(t.evicted_since().begin(), t.evicted_since().end()) ==
          std::set<int64_t>{1, 2});
  t.clear_touched();
  REQUIRE(t.touched() == 0);
  REQUIRE(t.evicted_since().empty());
}

TEST_CASE("A dynamic table's memory per row stays near its payload") {
  // key + row + Adagrad slot is 8 + 2 x 16 x 4 bytes; the table's own bookkeeping (count,
  // step, index at most half full, free list) must stay within 30% of it.
  auto o = options(16);
  auto t = table(o, "adagrad", 0.05f);
  for (int b = 0; b < 49; ++b) {  // 200704 rows: 49 full blocks
    const auto keys = key_range(4096, int64_t{b} * 4096 * 1'000'003, 1'000'003);
    REQUIRE(t.apply(keys, grads_of(keys, 16)).ok());
  }
  const double payload = static_cast<double>(t.rows()) * (8 + 2 * 16 * 4);
  REQUIRE(t.rows() == 49 * 4096);
  REQUIRE(static_cast<double>(t.memory_bytes()) <= 1.3 * payload);
}

TEST_CASE("A dynamic table refuses bad options and mismatched gradients") {
  auto o = options(0);
  REQUIRE_FALSE(o.check().ok());
  o = options(2);
  o.admit_probability = 0.0f;
  REQUIRE(o.check().error().message.find("admit_probability") != std::string::npos);
  o = options(2);
  o.init.kind = Initializer::Kind::glorot_uniform;
  REQUIRE_FALSE(o.check().ok());
  o = options(2);
  o.max_rows = max_table_rows;  // the index's slot numbers go that far, no further
  REQUIRE(o.check().ok());
  o.max_rows = max_table_rows + 1;
  REQUIRE(o.check().error().message.find("more shards") != std::string::npos);
  auto t = table(options(2));
  const std::vector<int64_t> keys{1, 2};
  REQUIRE_FALSE(t.apply(keys, grads_of({1}, 2)).ok());
  REQUIRE(t.rows() == 0);
  REQUIRE(t.step() == 0);
}

TEST_CASE("A dynamic table read in pages while it trains gives each lasting row once") {
  // 60 hot keys pushed every step stay; 30 new keys a step churn through the rest of a
  // 200-row cap. A step between every two pages of 7 rows: each hot row comes exactly once,
  // as it was when its page was read, and rows seen fewer than min_count times stay out.
  auto o = options(3);
  o.max_rows = 200;
  auto t = table(o);
  const auto hot = key_range(60, 1);
  int64_t next = 1000;
  auto step = [&] {
    std::vector<int64_t> keys = hot;
    for (int i = 0; i < 30; ++i)
      keys.push_back(next++);
    REQUIRE(t.apply(keys, grads_of(keys, 3)).ok());
  };
  for (int i = 0; i < 10; ++i)
    step();
  for (uint32_t min_count : {0u, 2u}) {
    std::unordered_map<int64_t, int> seen;
    int pages = 0;
    for (int64_t from = 0; from >= 0; ++pages) {
      std::vector<int64_t> keys;
      std::vector<float> values;
      from = t.page(from, 7, min_count, keys, values);
      REQUIRE(keys.size() <= 7);
      REQUIRE(values.size() == keys.size() * 3);
      for (size_t i = 0; i < keys.size(); ++i) {
        ++seen[keys[i]];
        const auto now = read(t, keys[i]);
        REQUIRE(std::equal(now.begin(), now.end(), values.begin() + 3 * i));
      }
      step();
    }
    REQUIRE(pages >= (min_count == 0 ? 200 : 60) / 7);  // 7 rows a page, none short but the last
    for (int64_t k : hot)
      REQUIRE(seen[k] == 1);
    for (const auto& [key, n] : seen)
      REQUIRE(n == 1);
    if (min_count == 2) REQUIRE(seen.size() == hot.size());  // churn keys are seen once each
    if (min_count == 0) REQUIRE(seen.size() > hot.size());
  }
  std::vector<int64_t> keys;
  std::vector<float> values;
  REQUIRE(t.page(1 << 20, 7, 0, keys, values) == -1);  // past the end: nothing, done
  REQUIRE(keys.empty());
  REQUIRE(t.page(-5, 1, 0, keys, values) >= 1);  // a negative start reads from the first slot
  REQUIRE(keys.size() == 1);
}
