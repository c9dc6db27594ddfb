#pragma once

// Input for models with named inputs (a Keras model's): batches of named columns
// (core/data/columns.hpp), read from the project's file formats by a list of FeatureSpec,
// the model's inputs and its labels. The pipeline is sparse_input()'s: files sharded by
// worker, records streamed, batched, each batch parsed in one map step, optionally cached,
// repeated and prefetched.
//
//   NamedInputOptions o;
//   o.format = DataFormat::tfrecord;
//   o.features = {{"age", ColumnKind::floats, {}}, {"tokens", ColumnKind::ints, {16}},
//                 {"label", ColumnKind::ints, {}}};
//   o.batch = 128;
//   auto it = named_input(files, ctx, o).make_iterator();
//   while (auto b = it->next()) use(b->column("tokens")->ints);  // [128, 16]
//
// What each format offers by name:
// - tfrecord: tf.train.Example records, each feature by its key (columns.hpp's
//   ExampleDecoder: exactly spec.per_example() values per record).
// - criteo: tab-separated lines `label, I1..I13, C1..C26`; label and I-fields as numbers
//   (an empty I-field is 0), C-fields as their hex strings, or as ints parsed from hex
//   (an empty one is 0). One value each.
// - csv: a header line names the columns; numbers and strings by the spec, one value each.
//   Fields may be quoted ("a, b", "" for a quote inside); no line breaks inside a field.
// - idx: Fashion-MNIST's IDX files (gzip'ed or not), the images file (rank >= 2) as
//   `image` and the labels file (rank 1) as `label`. Pixels are their raw values 0..255 as
//   floats (or ints), in any spec shape of rows * cols values ([28, 28], [784],
//   [28, 28, 1]). The files are one dataset, sharded by example.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/data/columns.hpp"
#include "core/data/data_format.hpp"
#include "core/data/dataset.hpp"
#include "core/data/input_context.hpp"

namespace troupe::core {

struct NamedInputOptions {
  DataFormat format = DataFormat::tfrecord;
  /// The model's inputs and its labels, as columns of each batch in this order.
  std::vector<FeatureSpec> features;
  size_t batch = 32;
  bool drop_remainder = true;
  /// Examples shuffled in a buffer of this many before batching (0: file order).
  size_t shuffle_buffer = 0;
  uint64_t seed = 1;
  /// Keep the parsed batches of the first pass in memory and replay them.
  bool cache = false;
  /// Passes over the files (forever when negative).
  int64_t epochs = -1;
  /// Batches read and parsed ahead on a background thread (0: on the caller's thread).
  size_t prefetch = 2;
  /// csv: the field separator.
  char csv_delimiter = ',';
};

/// Whether the options can make batches: specs valid (check_specs), a batch of at least
/// one, and each spec possible in the format (text formats and IDX labels hold one value
/// per example; criteo's C-fields are ints or strings; IDX holds no strings).
Status check(const NamedInputOptions& options);

/// This pipeline's share of `files` as batches of named columns, one per spec. With at
/// least as many files as pipelines, pipeline i reads files i, i + n, ...; with fewer, every
/// pipeline reads every file and keeps every n-th example (as tf.data's DATA auto-shard
/// policy). IDX: `files` is the images file and the labels file (either order, or only
/// one of them), one dataset, always sharded by example. Errors (invalid options, an
/// unreadable file, a damaged record, a feature the data lacks) are thrown from next() as
/// BadExpectedAccess naming the feature, the file and the record's offset.
Dataset<Batch> named_input(std::vector<std::string> files, const InputContext& ctx,
                           const NamedInputOptions& options);

/// Every example of `files`, in order, as batches of options.batch examples (the last
/// one smaller unless options.drop_remainder); for evaluation sets. Sharding, shuffling,
/// epochs, cache and prefetch are not used. Errors as named_input's, as values.
Expected<std::vector<Batch>> read_named_batches(const std::vector<std::string>& files,
                                                const NamedInputOptions& options);

/// The feature names a file offers: a TFRecord file's first record's, a CSV file's
/// header, Criteo's fixed `label, I1..I13, C1..C26`, an IDX file's `image` (rank >= 2) or
/// `label` (rank 1). A file that cannot be read is not_found / io_error; a TFRecord file
/// with no record or a CSV file with no header line is invalid_argument.
Expected<std::vector<std::string>> feature_names(const std::string& path, DataFormat format,
                                                 char csv_delimiter = ',');

}  // namespace troupe::core
