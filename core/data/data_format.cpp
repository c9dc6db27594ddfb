#include "core/data/data_format.hpp"

#include <string>

namespace troupe::core {

Expected<DataFormat> parse_data_format(std::string_view name) {
  for (DataFormat f : {DataFormat::tfrecord, DataFormat::criteo, DataFormat::csv, DataFormat::idx,
                       DataFormat::libsvm})
    if (name == data_format_name(f)) return f;
  return make_error(Errc::invalid_argument, "unknown data format '" +
                                                std::string(name.substr(0, 32)) +
                                                "' (tfrecord, criteo, csv, idx or libsvm)");
}

const char* data_format_name(DataFormat format) {
  switch (format) {
    case DataFormat::tfrecord:
      return "tfrecord";
    case DataFormat::criteo:
      return "criteo";
    case DataFormat::csv:
      return "csv";
    case DataFormat::idx:
      return "idx";
    case DataFormat::libsvm:
      return "libsvm";
  }
  return "?";
}

}  // namespace troupe::core
