#include <catch2/catch.hpp>

#include "core/partitioner.hpp"

using namespace troupe::core;

TEST_CASE("FixedShardsPartitioner caps at the number of rows", "[partitioner]") {
  CHECK(FixedShardsPartitioner(2).num_shards(Shape{10, 3}) == 2);
  CHECK(FixedShardsPartitioner(4).num_shards(Shape{3, 3}) == 3);
  CHECK(FixedShardsPartitioner(4).num_shards(Shape{1}) == 1);
}

TEST_CASE("MinSizePartitioner follows TensorFlow's arithmetic", "[partitioner]") {
  // TensorFlow's documented example: min_shard_bytes=4, max_shards=2, shape [6, 1] -> 2.
  CHECK(MinSizePartitioner(4, 2).num_shards(Shape{6, 1}) == 2);
  // Defaults (256 KiB, 1 shard) never split.
  CHECK(MinSizePartitioner().num_shards(Shape{100000, 100}) == 1);
  // 1000 x 100 floats = 400000 bytes; 256 KiB minimum -> ceil(1.53) = 2.
  CHECK(MinSizePartitioner(256 << 10, 8).num_shards(Shape{1000, 100}) == 2);
  // Never more shards than rows, never fewer than one.
  CHECK(MinSizePartitioner(1, 100).num_shards(Shape{3, 1000}) == 3);
  CHECK(MinSizePartitioner(1 << 30, 4).num_shards(Shape{10, 10}) == 1);
}

TEST_CASE("MaxSizePartitioner follows TensorFlow's arithmetic", "[partitioner]") {
  // TensorFlow's documented examples on shape [6, 1] float32.
  CHECK(MaxSizePartitioner(4).num_shards(Shape{6, 1}) == 6);
  CHECK(MaxSizePartitioner(4, 2).num_shards(Shape{6, 1}) == 2);
  CHECK(MaxSizePartitioner(1024).num_shards(Shape{6, 1}) == 1);
  // Rows of 400 bytes, 1000-byte shards -> 2 rows per shard -> 5 shards for 10 rows.
  CHECK(MaxSizePartitioner(1000).num_shards(Shape{10, 100}) == 5);
  // A row larger than the limit still makes one shard per row.
  CHECK(MaxSizePartitioner(10).num_shards(Shape{4, 100}) == 4);
}

TEST_CASE("split_rows gives the slack to the first shards", "[partitioner]") {
  auto shards = split_rows(Shape{10, 2}, 3);
  REQUIRE(shards.size() == 3);
  CHECK(shards[0].shape == (Shape{4, 2}));
  CHECK(shards[1].shape == (Shape{3, 2}));
  CHECK(shards[2].shape == (Shape{3, 2}));
  CHECK(shards[0].row_offset == 0);
  CHECK(shards[1].row_offset == 4);
  CHECK(shards[2].row_offset == 7);
}

TEST_CASE("ShardedVariableSpec locates rows and round-trips values", "[partitioner]") {
  VariableSpec spec{"emb", Shape{11, 3}, {Initializer::Kind::glorot_uniform, 0.0f, 7}};
  ShardedVariableSpec sharded(spec, FixedShardsPartitioner(4));
  REQUIRE(sharded.num_shards() == 4);
  CHECK(sharded.shard_of_row(0) == 0);
  CHECK(sharded.shard_of_row(2) == 0);
  CHECK(sharded.shard_of_row(3) == 1);
  CHECK(sharded.shard_of_row(10) == 3);

  Tensor full = initialize(spec.shape, spec.init);
  std::vector<ConstTensorView> parts;
  for (const auto& s : sharded.shards())
    parts.push_back(shard_view(full, s));
  Tensor back = concat_rows(parts);
  CHECK(max_abs_diff(full, back) == 0.0f);

  ShardedVariableSpec scalar(VariableSpec{"step", Shape{}, {}}, FixedShardsPartitioner(3));
  CHECK(scalar.num_shards() == 1);
}

TEST_CASE("Interleaved rows put row r on shard r % shards and round-trip values", "[partitioner]") {
  VariableSpec spec{"emb", Shape{11, 3}, {Initializer::Kind::glorot_uniform, 0.0f, 7}};
  ShardedVariableSpec sharded(spec, 4, RowLayout::interleaved);
  REQUIRE(sharded.num_shards() == 4);
  // The slack to the first shards, as in runs: 3, 3, 3, 2 rows.
  for (int i = 0; i < 4; ++i) {
    const auto& s = sharded.shards()[static_cast<size_t>(i)];
    CHECK(s.row_offset == i);
    CHECK(s.row_stride == 4);
    CHECK(s.shape == (Shape{i < 3 ? 3 : 2, 3}));
  }
  for (int64_t r = 0; r < 11; ++r)
    CHECK(sharded.shard_of_row(r) == r % 4);

  const Tensor full = initialize(spec.shape, spec.init);
  std::vector<Tensor> parts;
  for (const auto& s : sharded.shards())
    parts.push_back(shard_rows(full, s.row_offset, s.row_stride, s.shape[0]));
  // Shard 2 holds rows 2, 6 and 10.
  for (int64_t j = 0; j < 3; ++j)
    for (int64_t k = 0; k < 3; ++k)
      CHECK(parts[2][j * 3 + k] == full[(2 + 4 * j) * 3 + k]);
  std::vector<ConstTensorView> views(parts.begin(), parts.end());
  auto back = interleave_rows(views, "emb");
  REQUIRE(back.ok());
  CHECK(max_abs_diff(full, *back) == 0.0f);
  // Shards that are not an interleaved split are refused, naming the variable.
  std::swap(views[0], views[3]);
  auto wrong = interleave_rows(views, "emb");
  REQUIRE_FALSE(wrong.ok());
  CHECK(wrong.error().code == Errc::data_loss);
  CHECK_THAT(wrong.error().message, Catch::Contains("emb") && Catch::Contains("shard 0"));
}

TEST_CASE("Initializers are seeded and scaled", "[partitioner]") {
  Initializer g{Initializer::Kind::glorot_uniform, 0.0f, 3};
  Tensor a = initialize(Shape{100, 50}, g), b = initialize(Shape{100, 50}, g);
  CHECK(max_abs_diff(a, b) == 0.0f);
  const float limit = std::sqrt(6.0f / 150.0f);
  CHECK(a.view().flat().maxCoeff() <= limit);
  CHECK(a.view().flat().minCoeff() >= -limit);
  CHECK(a.view().flat().maxCoeff() > 0.9f * limit);
  Tensor c = initialize(Shape{4}, Initializer{Initializer::Kind::constant, 2.5f, 0});
  CHECK(c[3] == 2.5f);
  Tensor u = initialize(Shape{1000}, Initializer{Initializer::Kind::random_uniform, 0.05f, 1});
  CHECK(u.view().flat().maxCoeff() <= 0.05f);
  CHECK(u.view().flat().minCoeff() >= -0.05f);
  CHECK(u.view().flat().maxCoeff() > 0.045f);
}
