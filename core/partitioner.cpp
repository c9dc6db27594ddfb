#include "core/partitioner.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

namespace troupe::core {

namespace {

int64_t first_dim(const Shape& shape) {
  return shape.rank() == 0 ? 1 : shape[0];
}

}  // namespace

FixedShardsPartitioner::FixedShardsPartitioner(int num_shards) : num_shards_(num_shards) {
  TROUPE_ASSERT(num_shards >= 1, "FixedShardsPartitioner needs num_shards >= 1");
}

int FixedShardsPartitioner::num_shards(const Shape& shape, int64_t) const {
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(num_shards_, first_dim(shape))));
}

std::string FixedShardsPartitioner::describe() const {
  return "FixedShardsPartitioner(" + std::to_string(num_shards_) + ")";
}

MinSizePartitioner::MinSizePartitioner(int64_t min_shard_bytes, int max_shards)
    : min_shard_bytes_(min_shard_bytes), max_shards_(max_shards) {
  TROUPE_ASSERT(min_shard_bytes >= 1, "MinSizePartitioner needs min_shard_bytes >= 1");
  TROUPE_ASSERT(max_shards >= 1, "MinSizePartitioner needs max_shards >= 1");
}

int MinSizePartitioner::num_shards(const Shape& shape, int64_t element_bytes) const {
  const double total = static_cast<double>(shape.num_elements() * element_bytes);
  const auto by_size =
      static_cast<int64_t>(std::ceil(total / static_cast<double>(min_shard_bytes_)));
  const int64_t n = std::min({first_dim(shape), static_cast<int64_t>(max_shards_), by_size});
  return static_cast<int>(std::max<int64_t>(1, n));
}

std::string MinSizePartitioner::describe() const {
  return "MinSizePartitioner(min_shard_bytes=" + std::to_string(min_shard_bytes_) +
         ", max_shards=" + std::to_string(max_shards_) + ")";
}

MaxSizePartitioner::MaxSizePartitioner(int64_t max_shard_bytes, int max_shards)
    : max_shard_bytes_(max_shard_bytes), max_shards_(max_shards) {
  TROUPE_ASSERT(max_shard_bytes >= 1, "MaxSizePartitioner needs max_shard_bytes >= 1");
  TROUPE_ASSERT(max_shards >= 0, "MaxSizePartitioner needs max_shards >= 0");
}

int MaxSizePartitioner::num_shards(const Shape& shape, int64_t element_bytes) const {
  const int64_t rows = first_dim(shape);
  if (rows <= 0) return 1;
  const double bytes_per_row = static_cast<double>(shape.num_elements()) /
                               static_cast<double>(rows) * static_cast<double>(element_bytes);
  const auto rows_per_shard = std::max<int64_t>(
      1, static_cast<int64_t>(std::floor(static_cast<double>(max_shard_bytes_) / bytes_per_row)));
  int64_t n = (rows + rows_per_shard - 1) / rows_per_shard;
  if (max_shards_ > 0) n = std::min<int64_t>(n, max_shards_);
  return static_cast<int>(std::max<int64_t>(1, n));
}

std::string MaxSizePartitioner::describe() const {
  return "MaxSizePartitioner(max_shard_bytes=" + std::to_string(max_shard_bytes_) +
         ", max_shards=" + std::to_string(max_shards_) + ")";
}

std::string row_layout_name(RowLayout layout) {
  return layout == RowLayout::interleaved ? "interleaved" : "range";
}

std::vector<ShardInfo> split_rows(const Shape& shape, int num_shards, RowLayout layout) {
  TROUPE_ASSERT(shape.rank() >= 1, "only variables of rank >= 1 can be sharded");
  TROUPE_ASSERT(num_shards >= 1 && num_shards <= std::max<int64_t>(1, shape[0]),
                "num_shards must be in [1, rows]");
  std::vector<ShardInfo> shards;
  const int64_t base = shape[0] / num_shards;
  const int64_t extra = shape[0] % num_shards;
  int64_t offset = 0;
  for (int i = 0; i < num_shards; ++i) {
    ShardInfo s;
    s.index = i;
    s.row_offset = layout == RowLayout::interleaved ? i : offset;
    s.row_stride = layout == RowLayout::interleaved ? num_shards : 1;
    s.shape = shape;
    s.shape[0] = base + (i < extra ? 1 : 0);
    offset += s.shape[0];
    shards.push_back(s);
  }
  return shards;
}

ShardedVariableSpec::ShardedVariableSpec(VariableSpec spec, const Partitioner& partitioner)
    : ShardedVariableSpec(spec, spec.shape.rank() == 0 ? 1 : partitioner.num_shards(spec.shape)) {}

ShardedVariableSpec::ShardedVariableSpec(VariableSpec spec, int num_shards)
    : ShardedVariableSpec(std::move(spec), num_shards, RowLayout::range) {}

ShardedVariableSpec::ShardedVariableSpec(VariableSpec spec, int num_shards, RowLayout layout)
    : spec_(std::move(spec)) {
  if (spec_.shape.rank() == 0) {
    shards_.push_back(ShardInfo{0, 0, spec_.shape});
  } else {
    shards_ = split_rows(spec_.shape, num_shards, layout);
  }
}

int ShardedVariableSpec::shard_of_row(int64_t row) const {
  TROUPE_ASSERT(row >= 0 && row < first_dim(spec_.shape), "row outside the variable");
  if (shards_.front().row_stride > 1) return static_cast<int>(row % shards_.front().row_stride);
  // upper_bound on row offsets: the last shard whose offset is <= row.
  auto it = std::upper_bound(shards_.begin(), shards_.end(), row,
                             [](int64_t r, const ShardInfo& s) { return r < s.row_offset; });
  return static_cast<int>(std::prev(it) - shards_.begin());
}

Tensor initialize(const Shape& shape, const Initializer& init) {
  Tensor t(shape);
  switch (init.kind) {
    case Initializer::Kind::zeros:
      break;
    case Initializer::Kind::constant:
      t.fill(init.value);
      break;
    case Initializer::Kind::glorot_uniform: {
      const int64_t fan_out = shape.rank() == 0 ? 1 : shape[shape.rank() - 1];
      const int64_t fan_in =
          std::max<int64_t>(1, shape.num_elements() / std::max<int64_t>(1, fan_out));
      const float limit = std::sqrt(6.0f / static_cast<float>(fan_in + fan_out));
      std::mt19937_64 rng(init.seed);
      std::uniform_real_distribution<float> dist(-limit, limit);
      for (int64_t i = 0; i < t.size(); ++i)
        t[i] = dist(rng);
      break;
    }
    case Initializer::Kind::random_uniform: {
      std::mt19937_64 rng(init.seed);
      std::uniform_real_distribution<float> dist(-init.value, init.value);
      for (int64_t i = 0; i < t.size(); ++i)
        t[i] = dist(rng);
      break;
    }
    case Initializer::Kind::random_normal: {
      std::mt19937_64 rng(init.seed);
      std::normal_distribution<float> dist(0.0f, init.value);
      for (int64_t i = 0; i < t.size(); ++i)
        t[i] = dist(rng);
      break;
    }
    case Initializer::Kind::truncated_normal: {
      std::mt19937_64 rng(init.seed);
      std::normal_distribution<float> dist(0.0f, 1.0f);
      for (int64_t i = 0; i < t.size(); ++i) {
        float x = dist(rng);
        while (std::fabs(x) > 2.0f)
          x = dist(rng);
        t[i] = x * init.value;
      }
      break;
    }
  }
  return t;
}

ConstTensorView shard_view(ConstTensorView full, const ShardInfo& shard) {
  if (full.shape().rank() == 0) return full;
  return full.rows(shard.row_offset, shard.row_offset + shard.shape[0]);
}

Tensor shard_rows(ConstTensorView full, int64_t first, int64_t stride, int64_t count) {
  if (full.shape().rank() == 0) return Tensor::from_view(full);
  TROUPE_ASSERT(first >= 0 && stride >= 1 && count >= 0 &&
                    (count == 0 || first + (count - 1) * stride < full.shape()[0]),
                "shard rows outside the variable");
  if (stride == 1) return Tensor::from_view(full.rows(first, first + count));
  Shape s = full.shape();
  s[0] = count;
  Tensor out(s);
  const int64_t width = s.row_size();
  for (int64_t i = 0; i < count; ++i)
    std::memcpy(out.data() + i * width, full.data() + (first + i * stride) * width,
                static_cast<size_t>(width) * sizeof(float));
  return out;
}

Expected<Tensor> interleave_rows(const std::vector<ConstTensorView>& shards,
                                 const std::string& what) {
  if (shards.empty()) return make_error(Errc::data_loss, what + ": no shards");
  Shape s = shards.front().shape();
  if (s.rank() == 0) return make_error(Errc::data_loss, what + ": a scalar cannot be interleaved");
  const auto n = static_cast<int64_t>(shards.size());
  int64_t rows = 0;
  for (const auto& v : shards)
    rows += v.shape().rank() == s.rank() ? v.shape()[0] : 0;
  for (int64_t i = 0; i < n; ++i) {
    Shape want = s;
    want[0] = rows / n + (i < rows % n ? 1 : 0);
    if (shards[static_cast<size_t>(i)].shape() != want)
      return make_error(Errc::data_loss, what + ": interleaved shard " + std::to_string(i) +
                                             " is " +
                                             shards[static_cast<size_t>(i)].shape().to_string() +
                                             ", not " + want.to_string());
  }
  s[0] = rows;
  Tensor out(s);
  const int64_t width = s.row_size();
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(out.data() + r * width, shards[static_cast<size_t>(r % n)].data() + (r / n) * width,
                static_cast<size_t>(width) * sizeof(float));
  return out;
}

Tensor concat_rows(const std::vector<ConstTensorView>& shards) {
  TROUPE_ASSERT(!shards.empty(), "concat_rows of no shards");
  Shape s = shards.front().shape();
  if (s.rank() == 0) return Tensor::from_view(shards.front());
  int64_t rows = 0;
  for (const auto& v : shards)
    rows += v.shape()[0];
  s[0] = rows;
  Tensor out(s);
  int64_t at = 0;
  for (const auto& v : shards) {
    if (v.size() > 0)
      std::memcpy(out.data() + at, v.data(), static_cast<size_t>(v.size()) * sizeof(float));
    at += v.size();
  }
  return out;
}

}  // namespace troupe::core
