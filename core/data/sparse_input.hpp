#pragma once

// The input pipeline of click-through-rate training, in the order of TensorFlow's
// guidance for parameter-server input (and the SageMaker DeepFM): files sharded by worker,
// records streamed from each file, batched, each batch parsed as one map step, optionally
// cached, repeated, and prefetched, so that reading and parsing run on a background thread
// while the step trains on the previous batch.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/data/data_format.hpp"
#include "core/data/dataset.hpp"
#include "core/data/input_context.hpp"
#include "core/data/record_io.hpp"
#include "core/data/text_formats.hpp"

namespace troupe::core {

/// "libsvm", "criteo" or "tfrecord" (core/data/data_format.hpp): another format's name is
/// an invalid_argument error naming it, as is a name that is no format.
Expected<DataFormat> parse_sparse_format(std::string_view name);

struct SparseInputOptions {
  DataFormat format = DataFormat::criteo;
  CriteoOptions criteo;
  size_t batch = 256;
  bool drop_remainder = true;
  /// Records shuffled in a buffer of this many before batching (0: file order).
  size_t shuffle_buffer = 0;
  uint64_t seed = 1;
  /// Keep the parsed batches of the first pass in memory and replay them.
  bool cache = false;
  /// Passes over the files (forever when negative).
  int64_t epochs = -1;
  /// Batches read and parsed ahead on a background thread (0: on the caller's thread).
  size_t prefetch = 2;
};

/// The records of one file, streamed (one record in memory). A file that cannot be opened
/// or a damaged record throws (BadExpectedAccess) an error naming the file and offset.
Dataset<RawRecord> file_records(const std::string& path, DataFormat format);

/// Every `shards`-th record of TFRecord `files` read in order, starting at record `shard`
/// (as file_records of each file, then Dataset::shard): the others are passed over by
/// TFRecordReader::skip, their data neither copied nor checked here. With 512 workers on
/// one host reading every record of every file, the copies and checks were most of the
/// host's CPU at the job's start.
Dataset<RawRecord> sharded_tfrecords(std::vector<std::string> files, int64_t shards, int64_t shard);

/// Parses records into one Batch. A malformed record, or dense features of another width
/// than the batch's first record, is a data_loss error naming its file and offset.
Expected<Batch> parse_batch(const std::vector<RawRecord>& records, DataFormat format,
                            const CriteoOptions& criteo = {});

/// Every example of one file (for evaluation sets); errors as parse_batch's, and a file
/// that cannot be read is not_found / io_error naming it.
Expected<std::vector<Example>> read_examples(const std::string& path, DataFormat format,
                                             const CriteoOptions& criteo = {});

/// This pipeline's share of `files` as batches. With at least as many files as pipelines,
/// pipeline i reads files i, i + n, ... (file-level sharding); with fewer, every pipeline
/// reads every file and keeps every n-th record (as tf.data's DATA auto-shard policy).
/// Errors (unreadable file, damaged record) are thrown from next() as BadExpectedAccess.
Dataset<Batch> sparse_input(std::vector<std::string> files, const InputContext& ctx,
                            const SparseInputOptions& options);

}  // namespace troupe::core
