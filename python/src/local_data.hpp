#pragma once

// The data of a fit() in this process, from a troupe.data spec (a dict): NumPy arrays read
// once into columns, or files; cut into batches for one pipeline or a mirrored replica's
// shard.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <pybind11/pybind11.h>

#include "core/data/named_input.hpp"
#include "python/src/arrays.hpp"

namespace troupe::python {

namespace py = pybind11;

struct FileData {
  std::vector<std::string> files;
  core::NamedInputOptions options;
  core::InputContext shard;  // an explicit shard(n, i); else the fit's own context
  bool sharded = false;
};

/// The files, format and pipeline of a spec of files, checked against the model's specs
/// (a missing file or feature is an error naming it).
FileData file_data(const py::dict& d, const std::vector<core::FeatureSpec>& specs);

// A fit()'s data in this process: arrays read once, or files; with their pipeline.
struct LocalData {
  std::shared_ptr<const ArrayTable> table;  // arrays
  std::shared_ptr<const FileData> files;    // or files
  size_t batch = 32;
  bool shuffle = false, drop_remainder = false;
  uint64_t seed = 1;
  int64_t repeat = 1;
  std::optional<core::InputContext> shard;  // an explicit shard(n, i) of the arrays
};

/// A spec's data: arrays read by `specs` (once), or its files.
std::shared_ptr<const LocalData> local_data(const py::dict& data,
                                            const std::vector<core::FeatureSpec>& specs);

/// The batches of `d` for pipeline `ctx` (unless the data names its own shard). With
/// `split_batch` the data's batch is the global one and each replica takes its share
/// (TensorFlow's get_per_replica_batch_size: one the replicas do not divide is an error).
core::Dataset<core::Batch> local_dataset(const std::shared_ptr<const LocalData>& d,
                                         const core::InputContext& ctx, bool split_batch);

}  // namespace troupe::python
