#include "core/data/columns.hpp"

#include <charconv>
#include <cmath>
#include <cstring>
#include <set>

#include "core/data/example_walk.hpp"
#include "core/proto_wire.hpp"

namespace troupe::core {

const char* column_kind_name(ColumnKind kind) {
  switch (kind) {
    case ColumnKind::floats:
      return "floats";
    case ColumnKind::ints:
      return "ints";
    case ColumnKind::strings:
      return "strings";
  }
  return "?";
}

Expected<ColumnKind> column_kind_of_dtype(std::string_view dtype) {
  static const std::set<std::string_view> floats = {"float16", "bfloat16", "float32", "float64"};
  static const std::set<std::string_view> ints = {"bool",  "int8",   "int16",  "int32", "int64",
                                                  "uint8", "uint16", "uint32", "uint64"};
  if (floats.count(dtype) != 0) return ColumnKind::floats;
  if (ints.count(dtype) != 0) return ColumnKind::ints;
  if (dtype == "string") return ColumnKind::strings;
  return make_error(Errc::invalid_argument, "dtype '" + std::string(dtype.substr(0, 32)) +
                                                "' has no column kind (floats: float16, bfloat16, "
                                                "float32, float64; ints: bool, (u)int8..64; "
                                                "strings: string)");
}

int64_t FeatureSpec::per_example() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

Status check_specs(const std::vector<FeatureSpec>& specs) {
  std::set<std::string_view> names;
  for (const FeatureSpec& s : specs) {
    if (s.name.empty()) return make_error(Errc::invalid_argument, "a feature spec has no name");
    if (!names.insert(s.name).second)
      return make_error(Errc::invalid_argument, "feature '" + s.name + "' is named twice");
    if (static_cast<int>(s.shape.size()) > Shape::max_rank - 1)
      return make_error(Errc::invalid_argument,
                        "feature '" + s.name + "': rank " + std::to_string(s.shape.size()) +
                            " per example; at most " + std::to_string(Shape::max_rank - 1));
    for (int64_t d : s.shape)
      if (d < 1 || d > (int64_t{1} << 31))
        return make_error(Errc::invalid_argument, "feature '" + s.name + "': dimension " +
                                                      std::to_string(d) + " outside [1, 2^31]");
  }
  return {};
}

size_t Column::size() const {
  switch (kind) {
    case ColumnKind::floats:
      return floats.size();
    case ColumnKind::ints:
      return ints.size();
    case ColumnKind::strings:
      return strings.size();
  }
  return 0;
}

void Column::truncate(size_t n) {
  if (floats.size() > n) floats.resize(n);
  if (ints.size() > n) ints.resize(n);
  if (strings.size() > n) strings.resize(n);
}

std::vector<Column> make_columns(const std::vector<FeatureSpec>& specs, size_t examples) {
  std::vector<Column> out(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    Column& c = out[i];
    c.name = specs[i].name;
    c.kind = specs[i].kind;
    const auto n = examples * static_cast<size_t>(specs[i].per_example());
    if (c.kind == ColumnKind::floats) c.floats.reserve(n);
    if (c.kind == ColumnKind::ints) c.ints.reserve(n);
    if (c.kind == ColumnKind::strings) c.strings.reserve(n);
  }
  return out;
}

void finish_columns(std::vector<Column>& columns, const std::vector<FeatureSpec>& specs,
                    int64_t examples) {
  TROUPE_ASSERT(columns.size() == specs.size(), "finish_columns: one column per spec");
  for (size_t i = 0; i < specs.size(); ++i) {
    TROUPE_ASSERT(static_cast<int64_t>(columns[i].size()) == examples * specs[i].per_example(),
                  "finish_columns: a column of another size than its examples need");
    std::vector<int64_t> dims{examples};
    dims.insert(dims.end(), specs[i].shape.begin(), specs[i].shape.end());
    columns[i].shape = Shape(dims);
  }
}

bool append_text(Column& c, std::string_view text, bool hex) {
  if (c.kind == ColumnKind::strings) {
    c.strings.emplace_back(text);
    return true;
  }
  if (text.empty()) return false;
  const char* end = text.data() + text.size();
  if (c.kind == ColumnKind::ints) {
    const char* begin = text.data() + (text.front() == '+' && !hex ? 1 : 0);
    int64_t v = 0;
    auto [p, ec] = std::from_chars(begin, end, v, hex ? 16 : 10);
    if (ec == std::errc() && p == end) {
      c.ints.push_back(v);
      return true;
    }
    if (hex) return false;
    double d = 0;  // "3.0", "1e3": a whole number written as a float
    auto [q, ec2] = std::from_chars(begin, end, d);
    if (ec2 != std::errc() || q != end || d != std::floor(d) || std::fabs(d) > 9.0e18) return false;
    c.ints.push_back(static_cast<int64_t>(d));
    return true;
  }
  if (hex) return false;
  const char* begin = text.data() + (text.front() == '+' ? 1 : 0);
  float v = 0.0f;
  auto [p, ec] = std::from_chars(begin, end, v);
  if (ec != std::errc() || p != end) return false;
  c.floats.push_back(v);
  return true;
}

// --- tf.train.Example -----------------------------------------------------------------

namespace {

using example_wire::bad;
using example_wire::bytes_list;
using example_wire::each_feature;
using example_wire::float_list;
using example_wire::int64_list;
using example_wire::list_name;

// One Feature's values into the column of `spec`: the last list of the oneof wins, as
// protobuf has it.
Status decode_feature(std::string_view feature, const FeatureSpec& spec, Column& c) {
  proto::Reader fr(feature);
  uint32_t kind = 0;
  std::string_view list;
  while (!fr.done()) {
    auto f = fr.next();
    if (!f) return bad("feature '" + spec.name + "': " + f.error().message);
    if (f->type != proto::length_delimited || f->number < bytes_list || f->number > int64_list)
      continue;
    kind = f->number;
    list = f->bytes;
  }
  if (kind == 0) return {};  // no list: no values (the length check says so)
  const bool fits = kind == bytes_list   ? spec.kind == ColumnKind::strings
                    : kind == float_list ? spec.kind == ColumnKind::floats
                                         : spec.kind != ColumnKind::strings;
  if (!fits)
    return make_error(Errc::invalid_argument,
                      "tf.train.Example: feature '" + spec.name + "' is a " + list_name(kind) +
                          "; the model wants " + column_kind_name(spec.kind));
  auto bad_value = [&](const std::string& what) {
    return bad("feature '" + spec.name + "': " + what);
  };
  proto::Reader r(list);
  while (!r.done()) {
    auto f = r.next();
    if (!f) return bad_value(f.error().message);
    if (f->number != 1) continue;
    if (kind == bytes_list) {
      if (f->type != proto::length_delimited)
        return bad_value("bytes value of wire type " + std::to_string(f->type));
      c.strings.emplace_back(f->bytes);
    } else if (kind == float_list) {
      if (f->type == proto::fixed32) {
        float v;
        const auto bits = static_cast<uint32_t>(f->value);
        std::memcpy(&v, &bits, 4);
        c.floats.push_back(v);
      } else if (f->type == proto::length_delimited) {
        if (f->bytes.size() % 4 != 0)
          return bad_value("packed floats of " + std::to_string(f->bytes.size()) + " bytes");
        const size_t at = c.floats.size();
        c.floats.resize(at + f->bytes.size() / 4);
        if (!f->bytes.empty()) std::memcpy(c.floats.data() + at, f->bytes.data(), f->bytes.size());
      } else {
        return bad_value("float value of wire type " + std::to_string(f->type));
      }
    } else {
      auto put = [&c](uint64_t v) {
        const auto i = static_cast<int64_t>(v);
        if (c.kind == ColumnKind::ints)
          c.ints.push_back(i);
        else
          c.floats.push_back(static_cast<float>(i));
      };
      if (f->type == proto::varint) {
        put(f->value);
      } else if (f->type == proto::length_delimited) {
        proto::Reader packed(f->bytes);
        while (!packed.done()) {
          auto v = packed.read_varint();
          if (!v) return bad_value(v.error().message);
          put(*v);
        }
      } else {
        return bad_value("int64 value of wire type " + std::to_string(f->type));
      }
    }
  }
  return {};
}

}  // namespace

ExampleDecoder::ExampleDecoder(const std::vector<FeatureSpec>& specs)
    : specs_(specs), start_(specs.size()), seen_(specs.size()) {
  for (size_t i = 0; i < specs.size(); ++i)
    index_.emplace(specs[i].name, i);
}

Status ExampleDecoder::append(std::string_view bytes, std::vector<Column>& columns) {
  TROUPE_ASSERT(columns.size() == specs_.size(), "ExampleDecoder: one column per spec");
  for (size_t i = 0; i < columns.size(); ++i) {
    start_[i] = columns[i].size();
    seen_[i] = 0;
  }
  auto st = each_feature(bytes, [&](std::string_view key, std::string_view feature) -> Status {
    const auto it = index_.find(key);
    if (it == index_.end()) return {};
    const size_t k = it->second;
    if (seen_[k]) columns[k].truncate(start_[k]);  // a repeated key: the last entry wins
    seen_[k] = 1;
    return decode_feature(feature, specs_[k], columns[k]);
  });
  if (!st) return st;
  for (size_t k = 0; k < specs_.size(); ++k) {
    const FeatureSpec& spec = specs_[k];
    if (!seen_[k]) {
      std::string have;
      if (auto names = feature_names(bytes))
        for (const auto& n : *names)
          have += (have.empty() ? "" : ", ") + n;
      return make_error(Errc::invalid_argument, "tf.train.Example: no feature '" + spec.name +
                                                    "' (the record has: " + have + ")");
    }
    const auto got = static_cast<int64_t>(columns[k].size() - start_[k]);
    if (got != spec.per_example())
      return bad("feature '" + spec.name + "' holds " + std::to_string(got) +
                 " values; the model wants " + std::to_string(spec.per_example()) +
                 " (per-example shape " + Shape(spec.shape).to_string() + ")");
  }
  return {};
}

Expected<std::vector<std::string>> ExampleDecoder::feature_names(std::string_view bytes) {
  std::vector<std::string> out;
  auto st = each_feature(bytes, [&](std::string_view key, std::string_view) -> Status {
    out.emplace_back(key);
    return {};
  });
  if (!st) return st.error();
  return out;
}

std::string encode_tf_example(const std::vector<Column>& columns, int64_t row) {
  std::string features;
  for (const Column& c : columns) {
    const int64_t n = c.shape.row_size();
    const auto at = static_cast<size_t>(row * n);
    TROUPE_ASSERT(c.shape.rank() >= 1 && row >= 0 && row < c.shape[0],
                  "encode_tf_example: row outside the column");
    std::string list, packed;
    uint32_t kind = bytes_list;
    if (c.kind == ColumnKind::strings) {
      for (int64_t i = 0; i < n; ++i)
        proto::put_bytes(list, 1, c.strings[at + static_cast<size_t>(i)]);
    } else if (c.kind == ColumnKind::floats) {
      kind = float_list;
      for (int64_t i = 0; i < n; ++i)
        proto::put_le(packed, c.floats[at + static_cast<size_t>(i)]);
    } else {
      kind = int64_list;
      for (int64_t i = 0; i < n; ++i)
        proto::put_varint(packed, static_cast<uint64_t>(c.ints[at + static_cast<size_t>(i)]));
    }
    if (!packed.empty()) proto::put_bytes(list, 1, packed);
    std::string feature, entry;
    proto::put_bytes(feature, kind, list);
    proto::put_bytes(entry, 1, c.name);
    proto::put_bytes(entry, 2, feature);
    proto::put_bytes(features, 1, entry);
  }
  std::string out;
  proto::put_bytes(out, 1, features);
  return out;
}

}  // namespace troupe::core
