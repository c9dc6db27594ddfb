#include "core/data/text_formats.hpp"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <string_view>

namespace troupe::core {

namespace {

Error bad_line(const std::string& path, int64_t line, int64_t offset, const std::string& what) {
  return make_error(Errc::data_loss, path + ":" + std::to_string(line) + ": " + what +
                                         " at offset " + std::to_string(offset));
}

bool parse_float(std::string_view s, float& out) {
  if (s.empty()) return false;
  if (s.front() == '+') s.remove_prefix(1);
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size();
}

bool parse_int(std::string_view s, int64_t& out) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return !s.empty() && ec == std::errc() && p == s.data() + s.size();
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

// Calls parse(line, example) for each line of `path` and keeps the examples it fills
// (parse returns false for a line with none).
template <class Parse>
Expected<std::vector<Example>> read_lines(const std::string& path, Parse parse) {
  auto reader = LineReader::open(path);
  if (!reader) return reader.error();
  std::vector<Example> out;
  RawRecord line;
  for (;;) {
    auto more = reader->next(line);
    if (!more) return more.error();
    if (!*more) return out;
    Example e;
    auto kept = parse(line, e);
    if (!kept) return kept.error();
    if (*kept) out.push_back(std::move(e));
  }
}

Error bad_line(const RawRecord& r, int64_t at, const std::string& what) {
  return bad_line(r.file ? *r.file : std::string("<memory>"), r.index, r.offset + at, what);
}

}  // namespace

Expected<bool> parse_libsvm_line(const RawRecord& record, Example& e) {
  std::string_view line = record.data;
  const auto hash = line.find('#');
  if (hash != std::string_view::npos) line = line.substr(0, hash);
  if (trim(line).empty()) return false;
  size_t pos = 0;
  bool first = true;
  int64_t last_index = -1;
  while (pos < line.size()) {
    while (pos < line.size() && (line[pos] == ' ' || line[pos] == '\t' || line[pos] == '\r'))
      ++pos;
    if (pos >= line.size()) break;
    size_t end = pos;
    while (end < line.size() && line[end] != ' ' && line[end] != '\t' && line[end] != '\r')
      ++end;
    const std::string_view tok = line.substr(pos, end - pos);
    const auto at = static_cast<int64_t>(pos);
    if (first) {
      if (!parse_float(tok, e.label))
        return bad_line(record, at,
                        "label '" + std::string(tok.substr(0, 32)) + "' is not a number");
      first = false;
    } else {
      const auto colon = tok.find(':');
      int64_t index = 0;
      float value = 0.0f;
      if (colon == std::string_view::npos || !parse_int(tok.substr(0, colon), index) ||
          !parse_float(tok.substr(colon + 1), value))
        return bad_line(record, at,
                        "feature '" + std::string(tok.substr(0, 32)) + "' is not index:value");
      if (index <= last_index)
        return bad_line(record, at, "feature index " + std::to_string(index) + " not ascending");
      last_index = index;
      e.ids.push_back(index);
      e.values.push_back(value);
    }
    pos = end;
  }
  return true;
}

Expected<std::vector<Example>> read_libsvm(const std::string& path) {
  return read_lines(path, parse_libsvm_line);
}

Expected<std::vector<Example>> read_csv(const std::string& path, const CsvOptions& options) {
  int64_t columns = -1;
  std::vector<float> fields;
  return read_lines(path, [&](const RawRecord& record, Example& e) -> Expected<bool> {
    const std::string_view line = record.data;
    if (options.header && record.index == 1) return false;
    if (trim(line).empty()) return false;
    fields.clear();
    size_t pos = 0;
    for (;;) {
      size_t end = line.find(options.delimiter, pos);
      if (end == std::string_view::npos) end = line.size();
      const std::string_view field = trim(line.substr(pos, end - pos));
      float v = 0.0f;
      if (!parse_float(field, v))
        return bad_line(record, static_cast<int64_t>(pos),
                        "column " + std::to_string(fields.size() + 1) + " ('" +
                            std::string(field.substr(0, 32)) + "') is not a number");
      fields.push_back(v);
      if (end == line.size()) break;
      pos = end + 1;
    }
    const auto n = static_cast<int64_t>(fields.size());
    if (columns < 0) columns = n;
    if (n != columns)
      return bad_line(
          record, 0,
          std::to_string(n) + " fields where earlier lines had " + std::to_string(columns));
    const int64_t label_at =
        options.label_column < 0 ? n + options.label_column : options.label_column;
    if (label_at < 0 || label_at >= n)
      return bad_line(record, 0, "no label column " + std::to_string(options.label_column));
    e.label = fields[static_cast<size_t>(label_at)];
    e.features.reserve(fields.size() - 1);
    for (int64_t i = 0; i < n; ++i)
      if (i != label_at) e.features.push_back(fields[static_cast<size_t>(i)]);
    return true;
  });
}

int64_t hash_bucket(std::string_view value, int64_t buckets) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : value) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return static_cast<int64_t>(h % static_cast<uint64_t>(buckets));
}

int64_t key_bucket(int64_t key, int64_t buckets) {
  // SplitMix64's finalizer: a bijection of 64-bit words that spreads each input bit.
  uint64_t h = static_cast<uint64_t>(key);
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  h ^= h >> 31;
  return static_cast<int64_t>(h % static_cast<uint64_t>(buckets));
}

int64_t categorical_key(int field, std::string_view value) {
  uint64_t h = 0xcbf29ce484222325ull;
  auto add = [&h](unsigned char c) {
    h ^= c;
    h *= 0x100000001b3ull;
  };
  add(static_cast<unsigned char>(field));
  add(static_cast<unsigned char>(field >> 8));
  for (unsigned char c : value)
    add(c);
  // FNV's last bytes barely reach the high bits: one more mixing round spreads them.
  h ^= h >> 29;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 32;
  return static_cast<int64_t>(h);
}

Status check(const CriteoOptions& options) {
  if (options.raw_keys) return {};
  if (options.buckets_per_field < 1 ||
      options.buckets_per_field > (int64_t{1} << 56) / criteo_categorical_fields)
    return make_error(Errc::invalid_argument,
                      "criteo: buckets_per_field must be in [1, 2^56 / 26], got " +
                          std::to_string(options.buckets_per_field));
  return {};
}

Expected<bool> parse_criteo_line(const RawRecord& record, const CriteoOptions& options,
                                 Example& e) {
  constexpr int fields = 1 + criteo_integer_fields + criteo_categorical_fields;
  std::string_view line = record.data;
  if (line.empty()) return false;
  std::string_view field[fields];
  int64_t at[fields];
  int n = 0;
  size_t pos = 0;
  for (;;) {
    const size_t tab = line.find('\t', pos);
    if (n == fields)
      return bad_line(record, static_cast<int64_t>(pos),
                      "more than " + std::to_string(fields) + " tab-separated fields");
    field[n] = line.substr(pos, tab == std::string_view::npos ? std::string_view::npos : tab - pos);
    at[n++] = static_cast<int64_t>(pos);
    if (tab == std::string_view::npos) break;
    pos = tab + 1;
  }
  if (n != fields)
    return bad_line(record, 0,
                    std::to_string(n) + " tab-separated fields, not " + std::to_string(fields));
  if (field[0] != "0" && field[0] != "1")
    return bad_line(record, at[0],
                    "label '" + std::string(field[0].substr(0, 16)) + "' is not 0 or 1");
  e.label = field[0] == "1" ? 1.0f : 0.0f;
  e.features.assign(criteo_integer_fields, 0.0f);
  for (int k = 0; k < criteo_integer_fields; ++k) {
    const std::string_view f = field[1 + k];
    if (f.empty()) continue;  // missing: 0
    int64_t x = 0;
    if (!parse_int(f, x))
      return bad_line(record, at[1 + k],
                      "integer feature I" + std::to_string(k + 1) + " is not an integer");
    e.features[static_cast<size_t>(k)] = std::log1p(static_cast<float>(std::max<int64_t>(x, 0)));
  }
  e.ids.resize(criteo_categorical_fields);
  e.values.clear();
  for (int k = 0; k < criteo_categorical_fields; ++k) {
    const std::string_view value = field[1 + criteo_integer_fields + k];
    e.ids[static_cast<size_t>(k)] =
        options.raw_keys
            ? categorical_key(k, value)
            : k * options.buckets_per_field + hash_bucket(value, options.buckets_per_field);
  }
  return true;
}

Expected<std::vector<Example>> read_criteo(const std::string& path, const CriteoOptions& options) {
  if (auto st = check(options); !st) return st.error();
  return read_lines(
      path, [&](const RawRecord& r, Example& e) { return parse_criteo_line(r, options, e); });
}

}  // namespace troupe::core
