#include "core/data/sparse_input.hpp"

#include "core/data/tf_example.hpp"

namespace troupe::core {

Expected<DataFormat> parse_sparse_format(std::string_view name) {
  auto format = parse_data_format(name);
  if (!format) return format;
  if (*format == DataFormat::csv || *format == DataFormat::idx)
    return make_error(Errc::invalid_argument,
                      "the CTR programs read libsvm, criteo or tfrecord data, not " +
                          std::string(data_format_name(*format)) +
                          " (a Keras model reads it by input name: troupe train)");
  return format;
}

namespace {

// Streams one reader's records; the reader opens on the first next().
template <class Reader>
std::unique_ptr<Iterator<RawRecord>> stream(std::string path) {
  return detail::make_fn_iterator<RawRecord>(
      [path = std::move(path),
       reader = std::optional<Reader>()]() mutable -> std::optional<RawRecord> {
        if (!reader) reader.emplace(Reader::open(path).value());
        RawRecord r;
        if (!reader->next(r).value()) return std::nullopt;
        return r;
      });
}

// A fixed table's rows from a record's TFRecord ids (CriteoOptions::bucket_tfrecord_keys).
Status bucket_keys(Example& e, const CriteoOptions& o, const RawRecord& r) {
  if (!o.bucket_tfrecord_keys || o.raw_keys) return {};
  if (auto st = check(o); !st) return st;
  const int64_t rows = criteo_categorical_fields * o.buckets_per_field;
  for (size_t k = 0; k < e.ids.size(); ++k) {
    int64_t& id = e.ids[k];
    if (id >= 0 && id < rows) continue;
    if (e.ids.size() != static_cast<size_t>(criteo_categorical_fields))
      return make_error(Errc::data_loss,
                        r.where() + ": id " + std::to_string(id) + " is no row of the table's " +
                            std::to_string(rows) + ", and a raw key is hashed into its field's " +
                            "buckets only in a record of one id per field (26), not " +
                            std::to_string(e.ids.size()));
    id = static_cast<int64_t>(k) * o.buckets_per_field + key_bucket(id, o.buckets_per_field);
  }
  return {};
}

}  // namespace

Dataset<RawRecord> file_records(const std::string& path, DataFormat format) {
  if (format == DataFormat::tfrecord)
    return Dataset<RawRecord>([path] { return stream<TFRecordReader>(path); });
  return Dataset<RawRecord>([path] { return stream<LineReader>(path); });
}

Dataset<RawRecord> sharded_tfrecords(std::vector<std::string> files, int64_t shards,
                                     int64_t shard) {
  TROUPE_ASSERT(shards >= 1 && shard >= 0 && shard < shards, "shard index out of range");
  auto paths = std::make_shared<const std::vector<std::string>>(std::move(files));
  return Dataset<RawRecord>([paths, shards, shard] {
    return detail::make_fn_iterator<RawRecord>(
        [paths, shards, shard, file = size_t{0}, pos = int64_t{0},
         reader = std::optional<TFRecordReader>()]() mutable -> std::optional<RawRecord> {
          while (file < paths->size()) {
            if (!reader) reader.emplace(TFRecordReader::open((*paths)[file]).value());
            if (pos % shards == shard) {
              RawRecord r;
              if (reader->next(r).value()) {
                ++pos;
                return r;
              }
            } else if (reader->skip().value()) {
              ++pos;
              continue;
            }
            reader.reset();  // this file's end
            ++file;
          }
          return std::nullopt;
        });
  });
}

Expected<Batch> parse_batch(const std::vector<RawRecord>& records, DataFormat format,
                            const CriteoOptions& criteo) {
  std::vector<Example> examples;
  examples.reserve(records.size());
  for (const RawRecord& r : records) {
    Example e;
    if (format == DataFormat::tfrecord) {
      auto parsed = parse_example(r.data);
      if (!parsed)
        return make_error(parsed.error().code, r.where() + ": " + parsed.error().message);
      e = std::move(*parsed);
      if (auto st = bucket_keys(e, criteo, r); !st) return st.error();
    } else {
      auto kept =
          format == DataFormat::criteo ? parse_criteo_line(r, criteo, e) : parse_libsvm_line(r, e);
      if (!kept) return kept.error();
      if (!*kept) continue;
    }
    if (!examples.empty() && e.features.size() != examples.front().features.size())
      return make_error(Errc::data_loss, r.where() + ": " + std::to_string(e.features.size()) +
                                             " dense features where the batch has " +
                                             std::to_string(examples.front().features.size()));
    examples.push_back(std::move(e));
  }
  return collate(examples);
}

Expected<std::vector<Example>> read_examples(const std::string& path, DataFormat format,
                                             const CriteoOptions& criteo) {
  if (format == DataFormat::criteo || criteo.bucket_tfrecord_keys)
    if (auto st = check(criteo); !st) return st.error();
  std::vector<Example> out;
  auto parse = [&](const RawRecord& r) -> Status {
    Example e;
    if (format == DataFormat::tfrecord) {
      auto parsed = parse_example(r.data);
      if (!parsed)
        return make_error(parsed.error().code, r.where() + ": " + parsed.error().message);
      if (auto st = bucket_keys(*parsed, criteo, r); !st) return st.error();
      out.push_back(std::move(*parsed));
      return {};
    }
    auto kept =
        format == DataFormat::criteo ? parse_criteo_line(r, criteo, e) : parse_libsvm_line(r, e);
    if (!kept) return kept.error();
    if (*kept) out.push_back(std::move(e));
    return {};
  };
  auto each = [&](auto reader) -> Expected<std::vector<Example>> {
    if (!reader) return reader.error();
    RawRecord r;
    for (;;) {
      auto more = reader->next(r);
      if (!more) return more.error();
      if (!*more) return std::move(out);
      if (auto st = parse(r); !st) return st.error();
    }
  };
  if (format == DataFormat::tfrecord) return each(TFRecordReader::open(path));
  return each(LineReader::open(path));
}

Dataset<Batch> sparse_input(std::vector<std::string> files, const InputContext& ctx,
                            const SparseInputOptions& options) {
  const auto n = std::max<int64_t>(1, ctx.num_input_pipelines);
  const int64_t id = ctx.input_pipeline_id;
  const DataFormat format = options.format;
  const bool by_file = static_cast<int64_t>(files.size()) >= n;
  auto records = [&] {
    if (!by_file && format == DataFormat::tfrecord)
      return sharded_tfrecords(std::move(files), n, id);
    auto names = from_vector(std::move(files));
    if (by_file) names = names.shard(n, id);
    auto all = names.flat_map([format](std::string path) { return file_records(path, format); });
    return by_file ? all : all.shard(n, id);
  }();
  if (options.shuffle_buffer > 0)
    records = records.shuffle(options.shuffle_buffer, options.seed + static_cast<uint64_t>(id));
  const CriteoOptions criteo = options.criteo;
  auto batches = records.batch(options.batch, options.drop_remainder)
                     .map([format, criteo](std::vector<RawRecord> group) {
                       return parse_batch(group, format, criteo).value();  // throws the parse error
                     });
  if (options.cache) batches = batches.cache();
  if (options.epochs != 1) batches = batches.repeat(options.epochs);
  if (options.prefetch > 0) batches = batches.prefetch(options.prefetch);
  return batches;
}

}  // namespace troupe::core
