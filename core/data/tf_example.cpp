#include "core/data/tf_example.hpp"

#include <cstring>

#include "core/data/example_walk.hpp"
#include "core/proto_wire.hpp"

namespace troupe::core {

namespace {

using proto::put_bytes;
using proto::put_key;
using proto::put_le;
using proto::put_varint;

using example_wire::bad;
using example_wire::bytes_list;
using example_wire::float_list;
using example_wire::int64_list;
using ListKind = example_wire::ListKind;

void put_feature(std::string& features, std::string_view key, ListKind kind,
                 const std::string& packed) {
  std::string list;  // {repeated value = 1 [packed]}
  if (!packed.empty()) put_bytes(list, 1, packed);
  std::string feature;
  put_bytes(feature, kind, list);
  std::string entry;
  put_bytes(entry, 1, key);
  put_bytes(entry, 2, feature);
  put_bytes(features, 1, entry);
}

std::string packed_floats(const float* v, size_t n) {
  std::string out;
  for (size_t i = 0; i < n; ++i)
    put_le(out, v[i]);
  return out;
}

// The values of one Feature: its list kind, and its numbers as floats or int64s.
struct FeatureValues {
  uint32_t kind = 0;
  std::vector<float> floats;
  std::vector<int64_t> ints;
};

Status read_list(std::string_view list, uint32_t kind, const std::string& key, FeatureValues& out) {
  proto::Reader r(list);
  while (!r.done()) {
    auto f = r.next();
    if (!f) return bad("feature '" + key + "': " + f.error().message);
    if (f->number != 1) continue;
    if (kind == float_list) {
      if (f->type == proto::fixed32) {
        float v;
        const auto bits = static_cast<uint32_t>(f->value);
        std::memcpy(&v, &bits, 4);
        out.floats.push_back(v);
      } else if (f->type == proto::length_delimited) {
        if (f->bytes.size() % 4 != 0)
          return bad("feature '" + key + "': packed floats of " + std::to_string(f->bytes.size()) +
                     " bytes");
        const size_t at = out.floats.size();
        out.floats.resize(at + f->bytes.size() / 4);
        if (!f->bytes.empty())  // an empty packed list: no copy (memcpy from null is UB)
          std::memcpy(out.floats.data() + at, f->bytes.data(), f->bytes.size());
      } else {
        return bad("feature '" + key + "': float value of wire type " + std::to_string(f->type));
      }
    } else if (kind == int64_list) {
      if (f->type == proto::varint) {
        out.ints.push_back(static_cast<int64_t>(f->value));
      } else if (f->type == proto::length_delimited) {
        proto::Reader packed(f->bytes);
        while (!packed.done()) {
          auto v = packed.read_varint();
          if (!v) return bad("feature '" + key + "': " + v.error().message);
          out.ints.push_back(static_cast<int64_t>(*v));
        }
      } else {
        return bad("feature '" + key + "': int64 value of wire type " + std::to_string(f->type));
      }
    }
  }
  return {};
}

// One Feature: the last list of its oneof wins, as protobuf has it.
Status read_feature(std::string_view feature, const std::string& key, FeatureValues& out) {
  proto::Reader fr(feature);
  while (!fr.done()) {
    auto f = fr.next();
    if (!f) return bad("feature '" + key + "': " + f.error().message);
    if (f->type != proto::length_delimited || f->number < bytes_list || f->number > int64_list)
      continue;
    out = FeatureValues{};  // oneof: the last one set wins
    out.kind = f->number;
    if (auto st = read_list(f->bytes, f->number, key, out); !st) return st;
  }
  return {};
}

}  // namespace

std::string encode_example(const Example& e) {
  std::string features;
  put_feature(features, "label", float_list, packed_floats(&e.label, 1));
  std::string ids;
  for (int64_t id : e.ids)
    put_varint(ids, static_cast<uint64_t>(id));
  put_feature(features, "ids", int64_list, ids);
  if (!e.values.empty())
    put_feature(features, "values", float_list, packed_floats(e.values.data(), e.values.size()));
  if (!e.features.empty())
    put_feature(features, "dense", float_list, packed_floats(e.features.data(), e.features.size()));
  std::string out;
  put_bytes(out, 1, features);
  return out;
}

Expected<Example> parse_example(std::string_view bytes) {
  Example e;
  bool have_label = false, have_ids = false;
  auto st = example_wire::each_feature(
      bytes, [&](std::string_view k, std::string_view feature) -> Status {
        const std::string key(k.substr(0, 256));
        FeatureValues v;
        if (auto st = read_feature(feature, key, v); !st) return st;
        auto want = [&](uint32_t kind, const char* what) -> Status {
          if (v.kind == kind) return {};
          return bad("feature '" + key + "' is not " + what);
        };
        if (key == "label") {
          if (v.kind == float_list && v.floats.size() == 1) {
            e.label = v.floats[0];
          } else if (v.kind == int64_list && v.ints.size() == 1) {
            e.label = static_cast<float>(v.ints[0]);
          } else {
            return bad("feature 'label' is not one float or int64");
          }
          have_label = true;
        } else if (key == "ids") {
          if (auto st = want(int64_list, "an int64 list"); !st) return st;
          e.ids = std::move(v.ints);
          have_ids = true;
        } else if (key == "values") {
          if (auto st = want(float_list, "a float list"); !st) return st;
          e.values = std::move(v.floats);
        } else if (key == "dense") {
          if (auto st = want(float_list, "a float list"); !st) return st;
          e.features = std::move(v.floats);
        }
        return {};
      });
  if (!st) return st.error();
  if (!have_label) return bad("no 'label' feature");
  if (!have_ids) return bad("no 'ids' feature");
  if (!e.values.empty() && e.values.size() != e.ids.size())
    return bad(std::to_string(e.values.size()) + " 'values' for " + std::to_string(e.ids.size()) +
               " 'ids'");
  return e;
}

}  // namespace troupe::core
