#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>

#include "core/optimizer.hpp"
#include "core/partitioner.hpp"
#include "helpers.hpp"

using namespace troupe::core;
using troupe::test::random_tensor;

namespace {

// Independent scalar references (double precision) of each update rule, with the slot
// values of one element.
struct Ref {
  std::function<void(double& w, double g, std::vector<double>& s, int t)> step;
  std::vector<double> init;
};

Ref reference(const std::string& name, double lr) {
  if (name == "sgd") return {[lr](double& w, double g, auto&, int) { w -= lr * g; }, {}};
  if (name == "momentum")
    return {[lr](double& w, double g, auto& s, int) {
              s[0] = 0.9 * s[0] - lr * g;
              w += s[0];
            },
            {0.0}};
  if (name == "nesterov")
    return {[lr](double& w, double g, auto& s, int) {
              s[0] = 0.9 * s[0] - lr * g;
              w += 0.9 * s[0] - lr * g;
            },
            {0.0}};
  // Adagrad and RMSprop as Keras 3 has them: epsilon inside the square root (Keras 2 and
  // TensorFlow's kernels added it outside, as this reference once did).
  if (name == "adagrad")
    return {[lr](double& w, double g, auto& s, int) {
              s[0] += g * g;
              w -= lr * g / std::sqrt(s[0] + 1e-7);
            },
            {0.1}};
  if (name == "adam")
    return {[lr](double& w, double g, auto& s, int t) {
              s[0] = 0.9 * s[0] + 0.1 * g;
              s[1] = 0.999 * s[1] + 0.001 * g * g;
              const double lr_t = lr * std::sqrt(1 - std::pow(0.999, t)) / (1 - std::pow(0.9, t));
              w -= lr_t * s[0] / (std::sqrt(s[1]) + 1e-7);
            },
            {0.0, 0.0}};
  if (name == "ftrl")  // s[0] accumulator n, s[1] linear z; l1 = l2 = beta = 0
    return {[lr](double& w, double g, auto& s, int) {
              const double n_new = s[0] + g * g;
              s[1] += g - (std::sqrt(n_new) - std::sqrt(s[0])) / lr * w;
              w = -s[1] / (std::sqrt(n_new) / lr);
              s[0] = n_new;
            },
            {0.1, 0.0}};
  // rmsprop
  return {[lr](double& w, double g, auto& s, int) {
            s[0] = 0.9 * s[0] + 0.1 * g * g;
            w -= lr * g / std::sqrt(s[0] + 1e-7);
          },
          {0.0}};
}

const char* const all_optimizers[] = {"sgd",  "momentum", "nesterov", "adagrad",
                                      "adam", "rmsprop",  "ftrl"};

}  // namespace

TEST_CASE("Dense updates match scalar references over several steps", "[optimizer]") {
  for (const char* name : all_optimizers) {
    SECTION(name) {
      const double lr = 0.05;
      auto opt = make_optimizer(name, static_cast<float>(lr)).value();
      Tensor w = random_tensor(Shape{5, 4}, 1);
      SlotSet slots = opt->make_slots(w.shape());
      Ref ref = reference(name, lr);
      std::vector<double> rw(w.data(), w.data() + w.size());
      std::vector<std::vector<double>> rs(static_cast<size_t>(w.size()), ref.init);
      for (int t = 1; t <= 4; ++t) {
        Tensor g = random_tensor(w.shape(), 100 + static_cast<uint64_t>(t));
        REQUIRE(opt->apply_dense(w, g, slots).ok());
        for (size_t i = 0; i < rw.size(); ++i)
          ref.step(rw[i], g[static_cast<int64_t>(i)], rs[i], t);
      }
      CHECK(slots.iterations == 4);
      for (size_t i = 0; i < rw.size(); ++i)
        CHECK(w[static_cast<int64_t>(i)] == Approx(rw[i]).margin(1e-5));
    }
  }
}

TEST_CASE("Sparse updates touch only the given rows", "[optimizer]") {
  for (const char* name : all_optimizers) {
    SECTION(name) {
      auto sparse_opt = make_optimizer(name, 0.1f).value();
      auto dense_opt = make_optimizer(name, 0.1f).value();
      Tensor w = random_tensor(Shape{6, 3}, 2);
      Tensor before = Tensor::from_view(w);
      SlotSet slots = sparse_opt->make_slots(w.shape());
      const std::vector<int64_t> rows{4, 1};
      Tensor g = random_tensor(Shape{2, 3}, 3);
      REQUIRE(sparse_opt->apply_sparse(w, rows, g, slots).ok());

      // Each touched row must equal a dense update of that row alone.
      for (size_t k = 0; k < rows.size(); ++k) {
        Tensor row = Tensor::from_view(before.view().rows(rows[k], rows[k] + 1));
        SlotSet row_slots = dense_opt->make_slots(row.shape());
        REQUIRE(dense_opt
                    ->apply_dense(
                        row, g.view().rows(static_cast<int64_t>(k), static_cast<int64_t>(k) + 1),
                        row_slots)
                    .ok());
        CHECK(max_abs_diff(row, w.view().rows(rows[k], rows[k] + 1)) < 1e-6f);
      }
      for (int64_t r : {0, 2, 3, 5})
        CHECK(max_abs_diff(before.view().rows(r, r + 1), w.view().rows(r, r + 1)) == 0.0f);
    }
  }
}

TEST_CASE("Unique rows in ascending order update as the same rows in any order", "[optimizer]") {
  // Ascending unique rows (what a worker pushes) skip the merge; the result is the same.
  for (const char* name : all_optimizers) {
    SECTION(name) {
      auto a = make_optimizer(name, 0.1f).value(), b = make_optimizer(name, 0.1f).value();
      Tensor wa = random_tensor(Shape{6, 3}, 8), wb = Tensor::from_view(wa);
      SlotSet sa = a->make_slots(wa.shape()), sb = b->make_slots(wb.shape());
      Tensor g = random_tensor(Shape{3, 3}, 9);
      Tensor reversed(Shape{3, 3});
      for (int64_t k = 0; k < 3; ++k)
        std::copy_n(g.data() + (2 - k) * 3, 3, reversed.data() + k * 3);
      for (int step = 0; step < 3; ++step) {
        REQUIRE(a->apply_sparse(wa, {0, 2, 5}, g, sa).ok());
        REQUIRE(b->apply_sparse(wb, {5, 2, 0}, reversed, sb).ok());
      }
      CHECK(max_abs_diff(wa, wb) == 0.0f);
      for (size_t i = 0; i < sa.slots.size(); ++i)
        CHECK(max_abs_diff(sa.slots[i], sb.slots[i]) == 0.0f);
    }
  }
}

TEST_CASE("Repeated rows in a sparse update are summed first", "[optimizer]") {
  Adagrad a(0.1f), b(0.1f);
  Tensor w1 = random_tensor(Shape{4, 2}, 4), w2 = Tensor::from_view(w1);
  SlotSet s1 = a.make_slots(w1.shape()), s2 = b.make_slots(w2.shape());
  Tensor g(Shape{2, 2}, std::vector<float>{1, 2, 3, 4});
  Tensor summed(Shape{1, 2}, std::vector<float>{4, 6});
  REQUIRE(a.apply_sparse(w1, {2, 2}, g, s1).ok());
  REQUIRE(b.apply_sparse(w2, {2}, summed, s2).ok());
  CHECK(max_abs_diff(w1, w2) < 1e-7f);
  CHECK(max_abs_diff(s1.slots[0], s2.slots[0]) < 1e-6f);
}

TEST_CASE("Bad gradients are errors and change nothing", "[optimizer]") {
  SGD sgd(0.1f);
  Tensor w = random_tensor(Shape{4, 2}, 5), before = Tensor::from_view(w);
  SlotSet s = sgd.make_slots(w.shape());
  auto st = sgd.apply_sparse(w, {1, 9}, random_tensor(Shape{2, 2}, 6), s);
  REQUIRE_FALSE(st.ok());
  CHECK(st.error().code == Errc::out_of_range);
  CHECK_THAT(st.error().message, Catch::Contains("row 9"));
  auto st2 = sgd.apply_dense(w, random_tensor(Shape{2, 4}, 7), s);
  REQUIRE_FALSE(st2.ok());
  CHECK(st2.error().code == Errc::invalid_argument);
  CHECK(max_abs_diff(w, before) == 0.0f);
  CHECK(s.iterations == 0);
  CHECK_FALSE(make_optimizer("lion", 0.1f).ok());
}

TEST_CASE("Updating shards with their own slots equals updating the whole variable",
          "[optimizer]") {
  for (const char* name : all_optimizers) {
    SECTION(name) {
      auto whole_opt = make_optimizer(name, 0.01f).value();
      auto shard_opt = make_optimizer(name, 0.01f).value();
      Tensor whole = random_tensor(Shape{7, 3}, 8);
      SlotSet whole_slots = whole_opt->make_slots(whole.shape());
      ShardedVariableSpec spec(VariableSpec{"v", whole.shape(), {}}, FixedShardsPartitioner(3));
      std::vector<Tensor> shards;
      std::vector<SlotSet> shard_slots;
      for (const auto& s : spec.shards()) {
        shards.push_back(Tensor::from_view(shard_view(whole, s)));
        shard_slots.push_back(shard_opt->make_slots(s.shape));
      }
      for (int t = 0; t < 3; ++t) {
        Tensor g = random_tensor(whole.shape(), 20 + static_cast<uint64_t>(t));
        REQUIRE(whole_opt->apply_dense(whole, g, whole_slots).ok());
        for (const auto& s : spec.shards())
          REQUIRE(shard_opt
                      ->apply_dense(shards[static_cast<size_t>(s.index)], shard_view(g, s),
                                    shard_slots[static_cast<size_t>(s.index)])
                      .ok());
      }
      std::vector<ConstTensorView> parts(shards.begin(), shards.end());
      CHECK(max_abs_diff(whole, concat_rows(parts)) < 1e-6f);
    }
  }
}

TEST_CASE("FTRL with an L1 term drives small weights to exactly zero", "[optimizer]") {
  // One element, l1 = 1: while |z| <= l1 the weight is 0; a gradient that pushes z past
  // l1 moves it, to (sign(z) * l1 - z) / (sqrt(n) / lr + 2 * l2).
  Ftrl ftrl(0.5f, -0.5f, 0.1f, /*l1=*/1.0f, /*l2=*/0.5f);
  Tensor w(Shape{2}, 0.0f);
  SlotSet s = ftrl.make_slots(w.shape());
  Tensor g(Shape{2}, 0.0f);
  g[0] = 0.3f;  // small: z = 0.3, stays inside the L1 ball
  g[1] = 3.0f;  // large: z = 3
  REQUIRE(ftrl.apply_dense(w, g, s).ok());
  CHECK(w[0] == 0.0f);
  const double n1 = 0.1 + 9.0;
  CHECK(w[1] == Approx((1.0 - 3.0) / (std::sqrt(n1) / 0.5 + 2 * 0.5)).epsilon(1e-5));
  CHECK(s.slots[1][1] == Approx(3.0f));
  CHECK(ftrl.name() == "ftrl");
  CHECK(make_optimizer("ftrl", 0.1f).value()->slot_names().size() == 2);
}
