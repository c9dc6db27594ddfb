#pragma once

// NumPy arrays as a model's data: a dict of arrays by feature name read into whole columns
// by the model's feature specs (each checked: present, of a kind that holds its dtype, of
// the spec's per-example shape), then cut into batches, in a new random order each epoch
// when shuffled (Keras's fit(shuffle=True)).

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include "core/data/columns.hpp"
#include "core/data/dataset.hpp"
#include "core/data/example.hpp"
#include "core/data/input_context.hpp"

namespace troupe::python {

namespace py = pybind11;

/// Whole columns of `examples` examples, one per spec, each [examples, ...spec.shape].
struct ArrayTable {
  int64_t examples = 0;
  std::vector<core::FeatureSpec> specs;
  std::vector<core::Column> columns;
};

/// Reads `arrays` (feature name -> array-like) by `specs`. A missing feature, a dtype its
/// spec's kind cannot hold (a fractional float as ids, strings as numbers), a per-example
/// shape of another size or arrays of different lengths is an InvalidArgumentError naming
/// the feature (`what` says whose data: "fit's x").
ArrayTable read_arrays(const py::dict& arrays, const std::vector<core::FeatureSpec>& specs,
                       const std::string& what);

/// Examples `rows` of the table as one batch.
core::Batch gather(const ArrayTable& table, const std::vector<int64_t>& rows);

/// The table in batches of `batch` (the last smaller unless drop_remainder), in order, or
/// in a new random order for each iterator (each epoch) drawn from `seed` when `shuffle`.
/// With `shard` of n pipelines, pipeline i takes examples i, i + n, ... (tf.data's DATA
/// auto-shard policy).
core::Dataset<core::Batch> table_batches(std::shared_ptr<const ArrayTable> table, size_t batch,
                                         bool shuffle, uint64_t seed, bool drop_remainder,
                                         const core::InputContext& shard = {});

/// Every batch of the table, in order (evaluation and prediction).
std::vector<core::Batch> all_batches(const ArrayTable& table, size_t batch);

/// Writes `arrays` (name -> array [n, ...]) as a TFRecord file of n tf.train.Example
/// records: floats as float_list, integers and bools as int64_list, strings and bytes as
/// bytes_list, each of the array's per-example size. Returns n; an array of another kind or
/// length is an InvalidArgumentError naming it, a file that cannot be written UnknownError.
int64_t write_tfrecord(const std::string& path, const py::dict& arrays);

/// A float column [n, ...] as a NumPy array that owns the values (moved, not copied).
py::array_t<float> to_numpy(std::vector<float>&& values, const std::vector<int64_t>& shape);

}  // namespace troupe::python
