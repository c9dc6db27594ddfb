// The exported model file and the Predictor: scores equal the model's own forward pass on
// the same rows, bf16 rows as the model would compute with them rounded, damage named.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>

#include "core/ctr_reference.hpp"
#include "core/half.hpp"
#include "core/nn/ctr_export.hpp"
#include "helpers.hpp"
#include "troupe/predictor.hpp"

using namespace troupe;
namespace tc = troupe::core;

namespace {

tc::CtrExport small_model(bool dynamic) {
  tc::CtrExport m;
  m.config.model.kind = tc::CtrKind::deepfm;
  m.config.model.fields = 3;
  m.config.model.dense = 2;
  m.config.model.dim = 4;
  m.config.model.hidden = {8, 4};
  m.config.dynamic = dynamic;
  m.config.buckets_per_field = dynamic ? 0 : 10;
  uint64_t seed = 3;
  for (const auto& [name, shape] : tc::ctr_dense_variables(m.config.model))
    m.dense.emplace(name, test::random_tensor(shape, seed++, -0.5f, 0.5f));
  const int64_t rows = dynamic ? 20 : 30;
  m.rows = test::random_tensor(tc::Shape{rows, 5}, 99, -0.3f, 0.3f);
  if (dynamic)
    for (int64_t i = 0; i < rows; ++i)
      m.keys.push_back(int64_t{1000003} * i - 77);
  return m;
}

tc::Batch batch_of(const std::vector<int64_t>& ids, int64_t n) {
  tc::Batch b;
  b.ids = ids;
  b.values.assign(ids.size(), 1.0f);
  b.features = tc::Tensor(tc::Shape{n, 2});
  for (int64_t i = 0; i < b.features.size(); ++i)
    b.features.data()[i] = 0.1f * static_cast<float>(i % 7) - 0.2f;
  b.labels.assign(static_cast<size_t>(n), 0.0f);
  const auto fields = static_cast<int64_t>(ids.size()) / n;
  for (int64_t i = 0; i <= n; ++i)
    b.row_splits.push_back(i * fields);
  return b;
}

// What the model computes (the tests' plain reference of its formulas) over the batch's
// rows as the PS serves them (zeros for a key without a row), through a sigmoid.
std::vector<float> reference(const tc::CtrExport& m, const tc::Batch& b) {
  test::CtrReference model(m.config.model);
  for (auto& p : model.parameters())
    *p.value = m.dense.at(p.name);
  std::vector<int64_t> unique;
  std::vector<int32_t> index;
  tc::unique_ids(b.ids, unique, index);
  tc::Tensor rows(tc::Shape{static_cast<int64_t>(unique.size()), 5});
  for (size_t r = 0; r < unique.size(); ++r) {
    int64_t row = -1;
    if (m.config.dynamic) {
      for (size_t k = 0; k < m.keys.size(); ++k)
        if (m.keys[k] == unique[r]) row = static_cast<int64_t>(k);
    } else {
      row = unique[r];
    }
    for (int64_t c = 0; c < 5; ++c)
      rows.data()[static_cast<int64_t>(r) * 5 + c] = row < 0 ? 0.0f : m.rows.data()[row * 5 + c];
  }
  const tc::ConstTensorView logits = model.forward(b, rows, index);
  std::vector<float> p;
  for (int64_t i = 0; i < b.size(); ++i)
    p.push_back(static_cast<float>(1 / (1 + std::exp(-double{logits[i]}))));
  return p;
}

}  // namespace

TEST_CASE("A Predictor scores as the model's forward pass on the same rows", "[predictor]") {
  test::TempDir dir;
  for (bool dynamic : {true, false}) {
    const auto m = small_model(dynamic);
    const std::string path = dir.file(dynamic ? "dynamic.tmodel" : "fixed.tmodel");
    REQUIRE(tc::write_ctr_export(path, m).ok());
    auto p = Predictor::load(path);
    REQUIRE(p.ok());
    CHECK(p->rows() == m.rows.shape()[0]);
    CHECK(p->criteo_options().raw_keys == dynamic);
    // Four examples; with a dynamic table two ids have no row (they read as zeros).
    const std::vector<int64_t> ids =
        dynamic ? std::vector<int64_t>{m.keys[0],  m.keys[5], 4242,      m.keys[5],
                                       m.keys[19], -1,        m.keys[3], m.keys[3],
                                       m.keys[3],  m.keys[7], m.keys[0], m.keys[2]}
                : std::vector<int64_t>{0, 15, 29, 1, 11, 21, 9, 19, 20, 3, 13, 23};
    const auto b = batch_of(ids, 4);
    auto got = p->predict(b);
    REQUIRE(got.ok());
    const auto want = reference(m, b);
    REQUIRE(got->size() == 4);
    for (size_t i = 0; i < 4; ++i)
      CHECK(got->at(i) == Approx(want[i]).epsilon(1e-6));
    // Not all the same: the rows and features matter.
    CHECK(std::abs(got->at(0) - got->at(1)) > 1e-4);

    // bf16 rows: as the model computes with its rows rounded to bf16.
    auto half = m;
    half.config.bf16 = true;
    REQUIRE(tc::write_ctr_export(dir.file("half.tmodel"), half).ok());
    auto ph = Predictor::load(dir.file("half.tmodel"));
    REQUIRE(ph.ok());
    CHECK(ph->table_bytes() < p->table_bytes());
    for (int64_t i = 0; i < half.rows.size(); ++i)
      half.rows.data()[i] = tc::bf16_to_float(tc::float_to_bf16(half.rows.data()[i]));
    const auto want16 = reference(half, b);
    auto got16 = ph->predict(b).value();
    for (size_t i = 0; i < 4; ++i)
      CHECK(got16[i] == Approx(want16[i]).epsilon(1e-6));
  }
  // A fixed table's id outside it is an error, not a read past the rows.
  auto p = Predictor::load(dir.file("fixed.tmodel")).value();
  auto bad = p.predict(batch_of({0, 1, 30}, 1));
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.error().message, Catch::Contains("id 30 outside the table's 30 rows"));
}

TEST_CASE("A damaged or inconsistent model export is an error naming the file", "[predictor]") {
  test::TempDir dir;
  const auto m = small_model(true);
  const std::string path = dir.file("m.tmodel");
  REQUIRE(tc::write_ctr_export(path, m).ok());
  auto bytes = test::read_bytes(path);
  bytes[bytes.size() / 2] ^= 0x08;
  test::write_bytes(dir.file("flipped.tmodel"), bytes);
  auto flipped = Predictor::load(dir.file("flipped.tmodel"));
  REQUIRE_FALSE(flipped.ok());
  CHECK(flipped.error().code == tc::Errc::data_loss);
  CHECK_THAT(flipped.error().message, Catch::Contains(dir.file("flipped.tmodel")));
  CHECK_THAT(flipped.error().message, Catch::Contains("offset"));
  bytes.resize(bytes.size() - 9);
  test::write_bytes(dir.file("cut.tmodel"), bytes);
  CHECK(Predictor::load(dir.file("cut.tmodel")).error().code == tc::Errc::data_loss);

  // Parts that do not fit the config are refused when written, and (written by hand)
  // when read, naming the entry.
  auto wrong = m;
  wrong.keys.pop_back();
  CHECK(tc::write_ctr_export(dir.file("w.tmodel"), wrong).error().code ==
        tc::Errc::invalid_argument);
  wrong = m;
  wrong.keys[1] = wrong.keys[0];
  CHECK_THAT(tc::write_ctr_export(dir.file("w.tmodel"), wrong).error().message,
             Catch::Contains("a key twice"));
  wrong = m;
  wrong.dense.erase("bias");
  CHECK_THAT(tc::write_ctr_export(dir.file("w.tmodel"), wrong).error().message,
             Catch::Contains("dense parameters hold"));
  wrong = m;
  wrong.rows.data()[3] = std::nanf("");
  CHECK_FALSE(tc::write_ctr_export(dir.file("w.tmodel"), wrong).ok());
  CHECK(Predictor::load(dir.file("missing.tmodel")).error().code == tc::Errc::not_found);
}
