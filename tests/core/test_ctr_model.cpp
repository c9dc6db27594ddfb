#include <catch2/catch.hpp>

#include <algorithm>
#include <limits>
#include <random>

#include "core/keras/ctr_graph.hpp"
#include "core/nn/ctr_model.hpp"
#include "ctr_batch.hpp"
#include "ctr_reference.hpp"
#include "helpers.hpp"

using namespace troupe::core;

namespace {

// sum_i c_i * logit_i: a loss whose gradient with respect to the logits is c.
double weighted(troupe::test::CtrReference& m, const Batch& b, const Tensor& rows,
                const std::vector<int32_t>& index, const std::vector<float>& c) {
  const ConstTensorView logits = m.forward(b, rows, index);
  double s = 0.0;
  for (int64_t i = 0; i < b.size(); ++i)
    s += static_cast<double>(c[static_cast<size_t>(i)]) * logits[i];
  return s;
}

}  // namespace

// The tests' reference of the CTR models (ctr_reference.hpp), checked itself: the graph
// programs train is checked against it (test_builtin_models.cpp).
TEST_CASE("CTR models: analytic gradients match finite differences", "[ctr]") {
  for (CtrKind kind : {CtrKind::logistic, CtrKind::fm, CtrKind::deepfm, CtrKind::wide_deep}) {
    INFO(ctr_kind_name(kind));
    CtrModelConfig cfg;
    cfg.kind = kind;
    cfg.fields = 4;
    cfg.dense = 2;
    cfg.dim = 3;
    cfg.hidden = {6, 5};
    cfg.seed = 3;
    troupe::test::CtrReference m(cfg);
    const Batch b = troupe::test::make_ctr_batch(5, cfg.fields, cfg.dense, 11);
    std::vector<int64_t> unique;
    std::vector<int32_t> index;
    unique_ids(b.ids, unique, index);
    REQUIRE(unique.size() < b.ids.size());  // some rows are shared
    Tensor rows = troupe::test::random_tensor(
        Shape{static_cast<int64_t>(unique.size()), cfg.row_width()}, 5, -0.5f, 0.5f);
    const std::vector<float> c{0.3f, -1.1f, 0.7f, 0.2f, -0.4f};

    m.forward(b, rows, index);
    m.backward(ConstTensorView(c.data(), Shape{5, 1}));
    const Tensor row_grads = m.row_grads();
    std::vector<Tensor> grads;
    for (auto& p : m.parameters())
      grads.push_back(*p.grad);

    const float eps = 1e-3f;  // small: ReLU kinks lie close to 0 with these inputs
    auto numeric = [&](float& x) {
      const float saved = x;
      x = saved + eps;
      const double up = weighted(m, b, rows, index, c);
      x = saved - eps;
      const double down = weighted(m, b, rows, index, c);
      x = saved;
      return (up - down) / (2.0 * eps);
    };
    for (int64_t i = 0; i < rows.size(); ++i)
      CHECK(row_grads[i] == Approx(numeric(rows[i])).margin(2e-3).epsilon(2e-2));
    auto params = m.parameters();
    for (size_t p = 0; p < params.size(); ++p) {
      INFO(params[p].name);
      Tensor& v = *params[p].value;
      for (int64_t i = 0; i < v.size(); i += std::max<int64_t>(1, v.size() / 12))
        CHECK(grads[p][i] == Approx(numeric(v[i])).margin(2e-3).epsilon(2e-2));
    }
  }
}

TEST_CASE("CTR models: FM term equals the explicit sum over field pairs", "[ctr]") {
  CtrModelConfig cfg;
  cfg.kind = CtrKind::fm;
  cfg.fields = 3;
  cfg.dense = 0;
  cfg.dim = 2;
  troupe::test::CtrReference m(cfg);
  const Batch b = troupe::test::make_ctr_batch(1, 3, 0, 2);
  std::vector<int64_t> unique;
  std::vector<int32_t> index;
  unique_ids(b.ids, unique, index);
  Tensor rows = troupe::test::random_tensor(Shape{3, 3}, 9);
  const ConstTensorView logit = m.forward(b, rows, index);
  auto e = [&](int f, int j) { return rows[index[f] * 3 + 1 + j] * b.values[f]; };
  double expect = 0.0;  // bias is 0
  for (int f = 0; f < 3; ++f)
    expect += rows[index[f] * 3] * b.values[f];
  for (int f = 0; f < 3; ++f)
    for (int g = f + 1; g < 3; ++g)
      for (int j = 0; j < 2; ++j)
        expect += e(f, j) * e(g, j);
  CHECK(logit[0] == Approx(expect).epsilon(1e-5));
}

TEST_CASE("CTR models refuse batches that do not fit, naming what is wrong", "[ctr]") {
  CtrModelConfig cfg;
  cfg.fields = 4;
  cfg.dense = 2;
  cfg.dim = 2;
  cfg.hidden = {3};
  keras::CtrGraph m(cfg, /*rows=*/12, /*keyed=*/false);
  Batch b = troupe::test::make_ctr_batch(3, 5, 2, 1);  // 5 ids per example
  auto r = m.feed(b);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message.find("example 0 has 5 ids") != std::string::npos);
  b = troupe::test::make_ctr_batch(3, 4, 1, 1);
  CHECK(m.feed(b).error().message.find("1 dense features") != std::string::npos);
  b = troupe::test::make_ctr_batch(3, 4, 2, 1);
  REQUIRE(m.feed(b).ok());
  const int64_t u = static_cast<int64_t>(m.ids().size());
  CHECK_FALSE(m.give_rows(Tensor(Shape{u, 2})).ok());  // rows of the wrong width
  CHECK(m.give_rows(Tensor(Shape{u, 3})).ok());
  CHECK(parse_ctr_kind("deepfm").value() == CtrKind::deepfm);
  CHECK_FALSE(parse_ctr_kind("dfm").ok());
}

TEST_CASE("unique_ids: ascending unique ids and each id's row, whatever the ids' range", "[ctr]") {
  auto reference = [](const std::vector<int64_t>& ids) {
    std::vector<int64_t> u = ids;
    std::sort(u.begin(), u.end());
    u.erase(std::unique(u.begin(), u.end()), u.end());
    return u;
  };
  std::mt19937_64 rng(5);
  const int64_t lo = std::numeric_limits<int64_t>::min(), hi = std::numeric_limits<int64_t>::max();
  // Spans of up to 64 per id go through a bitmap, wider ones through a sort: both, with
  // and without the int64 extremes among the ids.
  struct Case {
    size_t n;
    uint64_t range;  // 0: hashed ids, the whole int64 range
    bool extremes;
  };
  for (const Case& c : std::vector<Case>{{0, 10, false},
                                         {1, 10, false},
                                         {7, 3, false},
                                         {1000, 50, true},
                                         {1000, 50, false},
                                         {64, 4096, false},
                                         {20000, 1000000, false},
                                         {26624, 2600000, false},
                                         {26624, 2600000, true},
                                         {5000, uint64_t{1} << 40, true},
                                         {3000, 0, true}}) {
    const size_t n = c.n;
    INFO("n " << n << " range " << c.range << " extremes " << c.extremes);
    std::vector<int64_t> ids(n);
    for (auto& id : ids)
      id = c.range == 0 ? static_cast<int64_t>(rng())
                        : static_cast<int64_t>(rng() % c.range) - static_cast<int64_t>(c.range / 3);
    if (n > 10) ids[5] = ids[6];
    if (c.extremes) {
      ids[3] = lo;
      ids[4] = hi;
    }
    std::vector<int64_t> unique;
    std::vector<int32_t> index;
    unique_ids(ids, unique, index);
    CHECK(unique == reference(ids));
    REQUIRE(index.size() == n);
    for (size_t i = 0; i < n; ++i)
      REQUIRE(unique[static_cast<size_t>(index[i])] == ids[i]);
  }
}
