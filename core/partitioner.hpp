#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/expected.hpp"
#include "core/tensor.hpp"

namespace troupe::core {

/// Decides into how many shards a variable is split along its first axis, with the
/// semantics of `tf.distribute.experimental.partitioners`.
///
///   FixedShardsPartitioner p(2);
///   p.num_shards(Shape{10, 4});   // 2
class Partitioner {
 public:
  virtual ~Partitioner() = default;
  /// Number of shards along axis 0 for a variable of `shape` with elements of
  /// `element_bytes` bytes. Always >= 1 and <= shape[0] for rank >= 1.
  virtual int num_shards(const Shape& shape, int64_t element_bytes = 4) const = 0;
  virtual std::string describe() const = 0;
};

/// min(num_shards, shape[0]) shards.
class FixedShardsPartitioner final : public Partitioner {
 public:
  explicit FixedShardsPartitioner(int num_shards);
  int num_shards(const Shape& shape, int64_t element_bytes = 4) const override;
  std::string describe() const override;

 private:
  int num_shards_;
};

/// As many shards as keep each at least `min_shard_bytes` (rounded up as TensorFlow does),
/// at most `max_shards`.
class MinSizePartitioner final : public Partitioner {
 public:
  explicit MinSizePartitioner(int64_t min_shard_bytes = 256 << 10, int max_shards = 1);
  int num_shards(const Shape& shape, int64_t element_bytes = 4) const override;
  std::string describe() const override;

 private:
  int64_t min_shard_bytes_;
  int max_shards_;
};

/// As few shards as keep each at most `max_shard_bytes` (a shard holds at least one row),
/// at most `max_shards` when it is positive.
class MaxSizePartitioner final : public Partitioner {
 public:
  explicit MaxSizePartitioner(int64_t max_shard_bytes, int max_shards = 0);
  int num_shards(const Shape& shape, int64_t element_bytes = 4) const override;
  std::string describe() const override;

 private:
  int64_t max_shard_bytes_;
  int max_shards_;
};

/// How a variable's rows are dealt to its shards.
///   range:       shard i holds one run of rows, [row_offset, row_offset + rows), as
///                TensorFlow's ShardedVariable does ("div").
///   interleaved: row r is on shard r % shards, at local row r / shards ("mod"): a table
///                whose ids are ranked by frequency (a vocabulary lookup's) has its hot
///                rows spread over every shard instead of crowding the first.
enum class RowLayout { range, interleaved };
std::string row_layout_name(RowLayout layout);

/// One shard of a variable: rows row_offset + i * row_stride, i in [0, shape[0]), of the
/// full variable (row_stride 1: a run; the shard count: interleaved, row_offset the index).
struct ShardInfo {
  int index = 0;
  int64_t row_offset = 0;
  Shape shape;
  int64_t row_stride = 1;
};

/// Splits `shape` into `num_shards` along axis 0; the first (rows % num_shards) shards get
/// one row more, as TensorFlow's ShardedVariable does.
std::vector<ShardInfo> split_rows(const Shape& shape, int num_shards,
                                  RowLayout layout = RowLayout::range);

/// How a variable is initialised.
struct Initializer {
  enum class Kind {
    zeros,
    constant,
    glorot_uniform,
    random_uniform,
    random_normal,
    truncated_normal  // Keras's TruncatedNormal: normal draws beyond 2 deviations drawn again
  } kind = Kind::zeros;
  // constant: the value; random_uniform: the limit (values in [-value, value]);
  // random_normal, truncated_normal: the standard deviation
  float value = 0.0f;
  uint64_t seed = 0;
};

/// The description of a variable: what a PS shard needs to create its slice.
struct VariableSpec {
  std::string name;
  Shape shape;
  Initializer init;
};

/// A variable split across shards by a partitioner.
class ShardedVariableSpec {
 public:
  ShardedVariableSpec(VariableSpec spec, const Partitioner& partitioner);
  ShardedVariableSpec(VariableSpec spec, int num_shards);

  const VariableSpec& spec() const { return spec_; }
  const std::vector<ShardInfo>& shards() const { return shards_; }
  int num_shards() const { return static_cast<int>(shards_.size()); }
  /// The shard holding `row` of the full variable.
  int shard_of_row(int64_t row) const;
  ShardedVariableSpec(VariableSpec spec, int num_shards, RowLayout layout);

 private:
  VariableSpec spec_;
  std::vector<ShardInfo> shards_;
};

/// Creates a tensor of `shape` initialised as `init` says (fan-in/out from the shape, as
/// Keras does for kernels: fan_in = product of all but the last dim, fan_out = last dim).
Tensor initialize(const Shape& shape, const Initializer& init);

/// The full-variable value of one shard: rows of `full` selected by `shard` (a run of
/// them; see shard_rows for any layout).
ConstTensorView shard_view(ConstTensorView full, const ShardInfo& shard);
/// Rows first, first + stride, ... (`count` of them) of `full`, copied; a scalar whole.
Tensor shard_rows(ConstTensorView full, int64_t first, int64_t stride, int64_t count);
/// Concatenates shards (in order) into one tensor.
Tensor concat_rows(const std::vector<ConstTensorView>& shards);
/// The full variable from the shards of an interleaved layout (shard i's local row j is
/// row i + j * shards.size()). Shards whose row counts or row widths are not those
/// split_rows gives are a data_loss error naming `what`.
Expected<Tensor> interleave_rows(const std::vector<ConstTensorView>& shards,
                                 const std::string& what);

}  // namespace troupe::core
