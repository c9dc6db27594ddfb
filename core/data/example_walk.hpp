#pragma once

// The outer layers of a serialized tf.train.Example, shared by the two readers of it
// (tf_example.cpp's fixed ids/values/dense/label form, columns.cpp's features by name):
// Example {Features features = 1}, Features {map<string, Feature> feature = 1}, each map
// entry {key = 1, value = 2}, and a Feature's oneof of lists (bytes 1, float 2, int64 3).

#include <cstdint>
#include <string>
#include <string_view>

#include "core/expected.hpp"
#include "core/proto_wire.hpp"

namespace troupe::core::example_wire {

enum ListKind : uint32_t { bytes_list = 1, float_list = 2, int64_list = 3 };

inline const char* list_name(uint32_t kind) {
  return kind == bytes_list ? "bytes_list" : kind == float_list ? "float_list" : "int64_list";
}

/// A damaged Example: data_loss, "tf.train.Example: <what>".
inline Error bad(const std::string& what) {
  return make_error(Errc::data_loss, "tf.train.Example: " + what);
}

/// Walks the map entries of a serialized Example: fn(key, feature bytes) for each entry, in
/// the order written; the first error (the walk's or fn's) ends it.
template <class Fn>
Status each_feature(std::string_view bytes, Fn fn) {
  proto::Reader top(bytes);
  while (!top.done()) {
    auto f = top.next();
    if (!f) return bad(f.error().message);
    if (f->number != 1 || f->type != proto::length_delimited) continue;
    proto::Reader features(f->bytes);
    while (!features.done()) {
      auto entry = features.next();
      if (!entry) return bad("features: " + entry.error().message);
      if (entry->number != 1 || entry->type != proto::length_delimited) continue;
      proto::Reader e(entry->bytes);
      std::string_view key, feature;
      while (!e.done()) {
        auto kv = e.next();
        if (!kv) return bad("feature map entry: " + kv.error().message);
        if (kv->type != proto::length_delimited) continue;
        if (kv->number == 1) key = kv->bytes;
        if (kv->number == 2) feature = kv->bytes;
      }
      if (auto st = fn(key, feature); !st) return st;
    }
  }
  return {};
}

}  // namespace troupe::core::example_wire
