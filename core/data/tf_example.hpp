#pragma once

// tf.train.Example records (tensorflow/core/example/example.proto, feature.proto), read and
// written by hand on core/proto_wire:
//
//   Example  { Features features = 1; }
//   Features { map<string, Feature> feature = 1; }      // entries {key = 1, value = 2}
//   Feature  { oneof { BytesList bytes_list = 1; FloatList float_list = 2;
//                      Int64List int64_list = 3; } }     // each {repeated value = 1}
//
// The features Troupe reads, as the SageMaker DeepFM's decode_tfrecord writes them:
// `label` (one float or int64), `ids` (int64s), `values` (floats, one per id; absent means
// all ones) and optionally `dense` (floats). Other features are skipped. Repeated numbers
// may be packed or not, as protobuf allows either.

#include <string>
#include <string_view>

#include "core/data/example.hpp"
#include "core/expected.hpp"

namespace troupe::core {

/// The serialized tf.train.Example of `e` (packed lists; `values` and `dense` only when
/// not empty).
std::string encode_example(const Example& e);

/// Parses a serialized tf.train.Example. Malformed bytes, a missing `label`, a feature of
/// the wrong list kind, or `values` of another length than `ids` is a data_loss error saying
/// what and where in the record.
Expected<Example> parse_example(std::string_view bytes);

}  // namespace troupe::core
