#pragma once

// The formats Troupe reads data in, one enum for both input pipelines: named columns for
// Keras models (core/data/named_input.hpp: tfrecord, criteo, csv, idx) and the built-in
// CTR programs' sparse examples (core/data/sparse_input.hpp: libsvm, criteo, tfrecord).
// Each pipeline refuses, naming it, a format it cannot read.

#include <string_view>

#include "core/expected.hpp"

namespace troupe::core {

enum class DataFormat { tfrecord, criteo, csv, idx, libsvm };

/// "tfrecord", "criteo", "csv", "idx" or "libsvm"; anything else is an invalid_argument
/// error naming it.
Expected<DataFormat> parse_data_format(std::string_view name);
const char* data_format_name(DataFormat format);

}  // namespace troupe::core
