#include "python/src/local_data.hpp"

#include <pybind11/stl.h>

#include "python/src/errors.hpp"
#include "tools/data_files.hpp"

namespace troupe::python {

FileData file_data(const py::dict& d, const std::vector<core::FeatureSpec>& specs) {
  FileData f;
  f.files = d["files"].cast<std::vector<std::string>>();
  auto format = take(tools::data_format_of(d["format"].cast<std::string>(), f.files));
  check(tools::check_data_files(f.files, format, specs));
  f.options.format = format;
  f.options.features = specs;
  f.options.batch = d["batch"].cast<size_t>();
  f.options.drop_remainder = d["drop_remainder"].cast<bool>();
  f.options.shuffle_buffer = d["shuffle"].cast<size_t>();
  f.options.seed = d["seed"].cast<uint64_t>();
  f.options.epochs = d["repeat"].cast<int64_t>();
  f.options.cache = d["cache"].cast<bool>();
  f.options.prefetch = d["prefetch"].cast<size_t>();
  if (!d["shard"].is_none()) {
    auto s = d["shard"].cast<std::pair<int64_t, int64_t>>();
    f.shard.num_input_pipelines = s.first;
    f.shard.input_pipeline_id = s.second;
    f.sharded = true;
  }
  return f;
}

std::shared_ptr<const LocalData> local_data(const py::dict& data,
                                            const std::vector<core::FeatureSpec>& specs) {
  auto d = std::make_shared<LocalData>();
  if (data["kind"].cast<std::string>() != "arrays") {
    d->files = std::make_shared<const FileData>(file_data(data, specs));
    return d;
  }
  d->table = std::make_shared<const ArrayTable>(
      read_arrays(data["arrays"].cast<py::dict>(), specs, "fit's x"));
  d->batch = data["batch"].cast<size_t>();
  d->shuffle = data["shuffle"].cast<bool>();
  d->seed = data["seed"].cast<uint64_t>();
  d->drop_remainder = data["drop_remainder"].cast<bool>();
  d->repeat = data["repeat"].cast<int64_t>();
  if (data.contains("shard") && !data["shard"].is_none()) {
    auto s = data["shard"].cast<std::pair<int64_t, int64_t>>();
    d->shard = core::InputContext{s.first, s.second, 1};
  }
  return d;
}

core::Dataset<core::Batch> local_dataset(const std::shared_ptr<const LocalData>& d,
                                         const core::InputContext& ctx, bool split_batch) {
  auto batch_of = [&](size_t global) {
    return split_batch ? static_cast<size_t>(
                             ctx.per_replica_batch_size(static_cast<int64_t>(global)).value())
                       : global;
  };
  if (d->files) {
    auto options = d->files->options;
    options.batch = batch_of(options.batch);
    return core::named_input(d->files->files, d->files->sharded ? d->files->shard : ctx, options);
  }
  auto ds = table_batches(d->table, batch_of(d->batch), d->shuffle, d->seed, d->drop_remainder,
                          d->shard ? *d->shard : ctx);
  return d->repeat == 1 ? ds : ds.repeat(d->repeat);
}

}  // namespace troupe::python
