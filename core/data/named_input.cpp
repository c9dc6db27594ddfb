#include "core/data/named_input.hpp"

#include <algorithm>
#include <mutex>
#include <optional>

#include "core/data/idx.hpp"
#include "core/data/record_io.hpp"
#include "core/data/sparse_input.hpp"
#include "core/data/text_formats.hpp"

namespace troupe::core {

namespace {

constexpr const char* idx_image = "image";
constexpr const char* idx_label = "label";

std::vector<std::string> criteo_names() {
  std::vector<std::string> out{"label"};
  for (int i = 1; i <= criteo_integer_fields; ++i)
    out.push_back("I" + std::to_string(i));
  for (int i = 1; i <= criteo_categorical_fields; ++i)
    out.push_back("C" + std::to_string(i));
  return out;
}

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names)
    out += (out.empty() ? "" : ", ") + n;
  return out;
}

Error bad_spec(const FeatureSpec& s, const std::string& what) {
  return make_error(Errc::invalid_argument, "feature '" + s.name + "': " + what);
}

// --- text lines (criteo, csv) ---------------------------------------------------------

// Where each spec's value sits in the lines of a text file.
struct TextLayout {
  std::vector<size_t> field;  // per spec: its field's index
  std::vector<char> hex;      // per spec: read as base-16 ints (criteo's C-fields)
  std::vector<char> zero;     // per spec: an empty field is 0 (criteo's features)
  size_t fields = 0;          // fields per line
};

// Each spec by name among `names` (the fields of `source`'s lines).
Expected<TextLayout> resolve(const std::vector<std::string>& names,
                             const std::vector<FeatureSpec>& specs, const std::string& source) {
  TextLayout l;
  l.fields = names.size();
  for (const FeatureSpec& s : specs) {
    const auto it = std::find(names.begin(), names.end(), s.name);
    if (it == names.end())
      return make_error(Errc::invalid_argument, source + ": no feature '" + s.name +
                                                    "' (the data has: " + joined(names) + ")");
    l.field.push_back(static_cast<size_t>(it - names.begin()));
  }
  return l;
}

Expected<TextLayout> criteo_layout(const std::vector<FeatureSpec>& specs) {
  auto l = resolve(criteo_names(), specs, "criteo");
  if (!l) return l;
  for (size_t k = 0; k < specs.size(); ++k) {
    l->hex.push_back(l->field[k] > criteo_integer_fields && specs[k].kind == ColumnKind::ints);
    l->zero.push_back(l->field[k] > 0);
  }
  return l;
}

struct TextField {
  std::string_view text;
  bool escaped = false;  // quoted, with "" standing for a quote
};

// Splits a line at `delim` into at most max_fields + 1 fields. csv: a field in double
// quotes may hold the delimiter; unquoted fields lose surrounding spaces.
Status split_line(const RawRecord& r, char delim, bool csv, size_t max_fields,
                  std::vector<TextField>& out) {
  out.clear();
  const std::string_view line = r.data;
  auto blank = [delim](char c) { return c == ' ' || c == '\r' || (c == '\t' && delim != '\t'); };
  size_t pos = 0;
  while (out.size() <= max_fields) {
    TextField f;
    size_t p = pos, end;
    if (csv)
      while (p < line.size() && blank(line[p]))
        ++p;
    if (csv && p < line.size() && line[p] == '"') {
      size_t i = p + 1;
      for (; i < line.size(); ++i) {
        if (line[i] != '"') continue;
        if (i + 1 < line.size() && line[i + 1] == '"') {
          f.escaped = true;
          ++i;
          continue;
        }
        break;
      }
      if (i >= line.size())
        return make_error(Errc::data_loss, r.where() + ": field " + std::to_string(out.size() + 1) +
                                               " opens a quote that the line does not close");
      f.text = line.substr(p + 1, i - p - 1);
      for (end = i + 1; end < line.size() && blank(line[end]);)
        ++end;
      if (end < line.size() && line[end] != delim)
        return make_error(Errc::data_loss, r.where() + ": text after the closing quote of field " +
                                               std::to_string(out.size() + 1));
    } else {
      end = std::min(line.find(delim, p), line.size());
      f.text = line.substr(p, end - p);
      if (csv)
        while (!f.text.empty() && blank(f.text.back()))
          f.text.remove_suffix(1);
    }
    out.push_back(f);
    if (end >= line.size()) break;
    pos = end + 1;
  }
  return {};
}

std::string unescape(std::string_view quoted) {
  std::string out;
  out.reserve(quoted.size());
  for (size_t i = 0; i < quoted.size(); ++i) {
    out.push_back(quoted[i]);
    if (quoted[i] == '"') ++i;  // "" stands for one quote
  }
  return out;
}

// The column names of a CSV header line.
Expected<std::vector<std::string>> header_names(const RawRecord& r, char delim) {
  std::vector<TextField> header;
  if (auto st = split_line(r, delim, true, size_t{1} << 20, header); !st) return st.error();
  std::vector<std::string> names;
  names.reserve(header.size());
  for (const auto& f : header)
    names.push_back(f.escaped ? unescape(f.text) : std::string(f.text));
  return names;
}

// A record with the layout of its file's lines (null for tf.train.Example records).
struct NamedRecord {
  RawRecord raw;
  std::shared_ptr<const TextLayout> layout;
};

Status append_line(const NamedRecord& r, const std::vector<FeatureSpec>& specs, char delim,
                   bool csv, std::vector<TextField>& fields, std::vector<Column>& columns) {
  const TextLayout& l = *r.layout;
  if (auto st = split_line(r.raw, delim, csv, l.fields, fields); !st) return st;
  if (fields.size() != l.fields)
    return make_error(Errc::data_loss,
                      r.raw.where() + ": " +
                          (fields.size() > l.fields ? "more than " + std::to_string(l.fields)
                                                    : std::to_string(fields.size())) +
                          " fields where " + (csv ? "the header names " : "criteo has ") +
                          std::to_string(l.fields));
  for (size_t k = 0; k < specs.size(); ++k) {
    const TextField& f = fields[l.field[k]];
    Column& c = columns[k];
    const bool hex = !l.hex.empty() && l.hex[k];
    if (f.text.empty() && !l.zero.empty() && l.zero[k] && c.kind != ColumnKind::strings) {
      if (c.kind == ColumnKind::ints)
        c.ints.push_back(0);
      else
        c.floats.push_back(0.0f);
    } else if (f.escaped && c.kind == ColumnKind::strings) {
      c.strings.push_back(unescape(f.text));
    } else if (f.escaped || !append_text(c, f.text, hex)) {
      return make_error(Errc::data_loss, r.raw.where() + ": feature '" + specs[k].name + "' ('" +
                                             std::string(f.text.substr(0, 32)) + "') is not " +
                                             (hex                          ? "a hexadecimal integer"
                                              : c.kind == ColumnKind::ints ? "an integer"
                                                                           : "a number"));
    }
  }
  return {};
}

Expected<Batch> parse_records(const std::vector<NamedRecord>& records, const NamedInputOptions& o) {
  auto columns = make_columns(o.features, records.size());
  if (o.format == DataFormat::tfrecord) {
    ExampleDecoder decoder(o.features);
    for (const NamedRecord& r : records)
      if (auto st = decoder.append(r.raw.data, columns); !st)
        return make_error(st.error().code, r.raw.where() + ": " + st.error().message);
  } else {
    const bool csv = o.format == DataFormat::csv;
    std::vector<TextField> fields;
    for (const NamedRecord& r : records)
      if (auto st = append_line(r, o.features, csv ? o.csv_delimiter : '\t', csv, fields, columns);
          !st)
        return st.error();
  }
  finish_columns(columns, o.features, static_cast<int64_t>(records.size()));
  Batch b;
  b.columns = std::move(columns);
  return b;
}

// The records of one file: tf.train.Examples, or the non-blank lines of a text file with
// their layout (csv: resolved from the file's header line when the file opens).
Dataset<NamedRecord> named_records(const std::string& path, const NamedInputOptions& o,
                                   const std::shared_ptr<const TextLayout>& criteo) {
  if (o.format == DataFormat::tfrecord)
    return file_records(path, DataFormat::tfrecord).map([](RawRecord r) {
      return NamedRecord{std::move(r), nullptr};
    });
  return Dataset<NamedRecord>([path, o, criteo] {
    return detail::make_fn_iterator<NamedRecord>(
        [path, o, layout = criteo,
         reader = std::optional<LineReader>()]() mutable -> std::optional<NamedRecord> {
          NamedRecord r;
          if (!reader) {  // kept only once the header has placed the columns
            auto opened = LineReader::open(path).value();
            if (o.format == DataFormat::csv && opened.next(r.raw).value()) {
              const auto names = header_names(r.raw, o.csv_delimiter).value();
              layout = std::make_shared<const TextLayout>(
                  resolve(names, o.features, record_source_name(path)).value());
            }
            reader.emplace(std::move(opened));
          }
          do {
            if (!reader->next(r.raw).value()) return std::nullopt;
          } while (r.raw.data.find_first_not_of(" \t\r") == std::string::npos);
          r.layout = layout;
          return r;
        });
  });
}

// --- idx ------------------------------------------------------------------------------

// The IDX files, loaded by the first iterator that needs them and shared by all.
struct IdxData {
  std::mutex mu;
  bool loaded = false;
  std::optional<IdxArray> image, label;
  int64_t examples = 0;
};

Status load_idx(const std::vector<std::string>& files, const std::vector<FeatureSpec>& specs,
                IdxData& d) {
  if (files.empty() || files.size() > 2)
    return make_error(Errc::invalid_argument, "idx: " + std::to_string(files.size()) +
                                                  " files; give the images file and the "
                                                  "labels file");
  std::vector<std::string> names, paths;
  for (const std::string& path : files) {
    auto a = read_idx(path);
    if (!a) return a.error();
    auto& slot = a->dims.size() == 1 ? d.label : d.image;
    if (slot)
      return make_error(Errc::invalid_argument,
                        "idx: " + path + " and " + paths.back() + " are both " +
                            (a->dims.size() == 1 ? "labels" : "images") + " files");
    const int64_t n = a->dims[0];
    if (!paths.empty() && n != d.examples)
      return make_error(Errc::data_loss, path + " holds " + std::to_string(n) + " examples but " +
                                             paths.back() + " holds " + std::to_string(d.examples));
    d.examples = n;
    names.push_back(a->dims.size() == 1 ? idx_label : idx_image);
    paths.push_back(path);
    slot = std::move(*a);
  }
  for (const FeatureSpec& s : specs) {
    const bool image = s.name == idx_image;
    if ((image && !d.image) || (s.name == idx_label && !d.label) || (!image && s.name != idx_label))
      return make_error(Errc::invalid_argument,
                        "idx: no feature '" + s.name + "' (the data has: " + joined(names) + ")");
    if (image) {
      const int64_t pixels = static_cast<int64_t>(d.image->data.size()) / d.examples;
      if (s.per_example() != pixels)
        return bad_spec(s, "per-example shape " + Shape(s.shape).to_string() + " of " +
                               std::to_string(s.per_example()) + " values; the images hold " +
                               std::to_string(pixels));
    }
  }
  return {};
}

Batch gather_idx(const std::vector<int64_t>& rows, const IdxData& d,
                 const std::vector<FeatureSpec>& specs) {
  auto columns = make_columns(specs, rows.size());
  for (size_t k = 0; k < specs.size(); ++k) {
    const IdxArray& a = specs[k].name == idx_image ? *d.image : *d.label;
    const auto width = static_cast<int64_t>(a.data.size()) / d.examples;
    Column& c = columns[k];
    for (int64_t row : rows) {
      const uint8_t* p = a.data.data() + row * width;
      if (c.kind == ColumnKind::floats)
        c.floats.insert(c.floats.end(), p, p + width);
      else
        c.ints.insert(c.ints.end(), p, p + width);
    }
  }
  finish_columns(columns, specs, static_cast<int64_t>(rows.size()));
  Batch b;
  b.columns = std::move(columns);
  return b;
}

Dataset<Batch> idx_input(const std::vector<std::string>& files, int64_t shards, int64_t shard,
                         const NamedInputOptions& o) {
  auto data = std::make_shared<IdxData>();
  Dataset<int64_t> rows([files, o, data] {
    return detail::make_fn_iterator<int64_t>(
        [files, o, data, i = int64_t{-1}]() mutable -> std::optional<int64_t> {
          if (i < 0) {
            std::lock_guard<std::mutex> lock(data->mu);
            if (!data->loaded) {
              IdxData fresh;
              if (auto st = load_idx(files, o.features, fresh); !st)
                throw BadExpectedAccess(st.error());
              data->image = std::move(fresh.image);
              data->label = std::move(fresh.label);
              data->examples = fresh.examples;
              data->loaded = true;
            }
            i = 0;
          }
          if (i >= data->examples) return std::nullopt;
          return i++;
        });
  });
  if (shards > 1) rows = rows.shard(shards, shard);
  if (o.shuffle_buffer > 0)
    rows = rows.shuffle(o.shuffle_buffer, o.seed + static_cast<uint64_t>(shard));
  const auto& specs = o.features;
  return rows.batch(o.batch, o.drop_remainder)
      .map([data, specs](const std::vector<int64_t>& group) {
        return gather_idx(group, *data, specs);  // loaded: the rows came from the loaded data
      });
}

// Files of records (tfrecord, criteo, csv), sharded by file or by record as sparse_input.
Dataset<Batch> record_input(std::vector<std::string> files, int64_t shards, int64_t shard,
                            const NamedInputOptions& o) {
  std::shared_ptr<const TextLayout> criteo;
  if (o.format == DataFormat::criteo)
    criteo = std::make_shared<const TextLayout>(criteo_layout(o.features).value());
  const bool by_file = static_cast<int64_t>(files.size()) >= shards;
  auto records = [&] {
    if (!by_file && o.format == DataFormat::tfrecord)
      return sharded_tfrecords(std::move(files), shards, shard).map([](RawRecord r) {
        return NamedRecord{std::move(r), nullptr};
      });
    auto names = from_vector(std::move(files));
    if (by_file) names = names.shard(shards, shard);
    auto all = names.flat_map(
        [o, criteo](const std::string& path) { return named_records(path, o, criteo); });
    return by_file ? all : all.shard(shards, shard);
  }();
  if (o.shuffle_buffer > 0)
    records = records.shuffle(o.shuffle_buffer, o.seed + static_cast<uint64_t>(shard));
  return records.batch(o.batch, o.drop_remainder).map([o](const std::vector<NamedRecord>& group) {
    return parse_records(group, o).value();  // throws the parse error
  });
}

Dataset<Batch> failing(const Error& e) {
  return Dataset<Batch>([e] {
    return detail::make_fn_iterator<Batch>(
        [e]() -> std::optional<Batch> { throw BadExpectedAccess(e); });
  });
}

}  // namespace

Status check(const NamedInputOptions& o) {
  if (auto st = check_specs(o.features); !st) return st;
  if (o.features.empty()) return make_error(Errc::invalid_argument, "no features to read");
  if (o.batch < 1) return make_error(Errc::invalid_argument, "batch size must be at least 1");
  for (const FeatureSpec& s : o.features) {
    const bool one = s.per_example() == 1;
    switch (o.format) {
      case DataFormat::tfrecord:
        break;
      case DataFormat::csv:
      case DataFormat::criteo:
        if (!one)
          return bad_spec(s, "per-example shape " + Shape(s.shape).to_string() + "; a " +
                                 data_format_name(o.format) + " field holds one value");
        if (o.format == DataFormat::criteo && s.name.size() > 1 && s.name[0] == 'C' &&
            s.kind == ColumnKind::floats)
          return bad_spec(s, "criteo's categorical fields are ints (from hex) or strings");
        break;
      case DataFormat::libsvm:
        return make_error(Errc::invalid_argument,
                          "libsvm data has no feature names for a Keras model's inputs: read it "
                          "with the CTR programs (ctr_ps, ctr_fit), or write it as TFRecord or "
                          "CSV");
      case DataFormat::idx:
        if (s.kind == ColumnKind::strings) return bad_spec(s, "IDX files hold numbers");
        if (s.name == idx_label && !one)
          return bad_spec(
              s, "per-example shape " + Shape(s.shape).to_string() + "; an IDX label is one value");
        break;
    }
  }
  if (o.format == DataFormat::criteo)
    if (auto l = criteo_layout(o.features); !l) return l.error();
  return {};
}

Dataset<Batch> named_input(std::vector<std::string> files, const InputContext& ctx,
                           const NamedInputOptions& options) {
  if (auto st = check(options); !st) return failing(st.error());
  const auto n = std::max<int64_t>(1, ctx.num_input_pipelines);
  const int64_t id = ctx.input_pipeline_id;
  auto batches = options.format == DataFormat::idx ? idx_input(files, n, id, options)
                                                   : record_input(std::move(files), n, id, options);
  if (options.cache) batches = batches.cache();
  if (options.epochs != 1) batches = batches.repeat(options.epochs);
  if (options.prefetch > 0) batches = batches.prefetch(options.prefetch);
  return batches;
}

Expected<std::vector<Batch>> read_named_batches(const std::vector<std::string>& files,
                                                const NamedInputOptions& options) {
  NamedInputOptions o = options;
  o.shuffle_buffer = 0;
  o.cache = false;
  o.epochs = 1;
  o.prefetch = 0;
  std::vector<Batch> out;
  try {
    auto it = named_input(files, InputContext{}, o).make_iterator();
    while (auto b = it->next())
      out.push_back(std::move(*b));
  } catch (const BadExpectedAccess& e) {
    return e.error();
  }
  return out;
}

Expected<std::vector<std::string>> feature_names(const std::string& path, DataFormat format,
                                                 char csv_delimiter) {
  RawRecord r;
  switch (format) {
    case DataFormat::tfrecord: {
      auto reader = TFRecordReader::open(path);
      if (!reader) return reader.error();
      auto more = reader->next(r);
      if (!more) return more.error();
      if (!*more) return make_error(Errc::invalid_argument, path + ": holds no records");
      auto names = ExampleDecoder::feature_names(r.data);
      if (!names) return make_error(names.error().code, r.where() + ": " + names.error().message);
      return names;
    }
    case DataFormat::criteo:
    case DataFormat::csv: {
      auto reader = LineReader::open(path);
      if (!reader) return reader.error();
      if (format == DataFormat::criteo) return criteo_names();
      auto more = reader->next(r);
      if (!more) return more.error();
      if (!*more) return make_error(Errc::invalid_argument, path + ": no header line");
      return header_names(r, csv_delimiter);
    }
    case DataFormat::idx: {
      auto a = read_idx(path);
      if (!a) return a.error();
      return std::vector<std::string>{a->dims.size() == 1 ? idx_label : idx_image};
    }
  }
  return make_error(Errc::internal, "unknown data format");
}

}  // namespace troupe::core
