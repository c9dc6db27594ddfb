#pragma once

// The data files a command names: files as given, directories expanded, and their format.

#include <string>
#include <vector>

#include "core/data/named_input.hpp"

namespace troupe::tools {

/// Each path a file as given, or a directory's files sorted; for IDX a directory's
/// `train-*` files (`t10k-*` ones with `validation`), as Fashion-MNIST's are named. A path
/// that does not exist, or a directory without files, is an error naming it.
core::Expected<std::vector<std::string>> expand_data_files(const std::vector<std::string>& paths,
                                                           const std::string& format,
                                                           bool validation);

/// `given` parsed, or the format the files' names say (.tfrecord, .csv, -ubyte, .txt/.tsv).
core::Expected<core::DataFormat> data_format_of(const std::string& given,
                                                const std::vector<std::string>& paths);

/// Whether `files` hold what a model reads (`specs`: its inputs and labels), before any
/// task trains: every file offers each feature by name (else an invalid_argument error
/// naming the feature, the file and what it has), and the first example reads as the specs
/// want it (a feature of another kind or length is the reader's error, naming the file).
core::Status check_data_files(const std::vector<std::string>& files, core::DataFormat format,
                              const std::vector<core::FeatureSpec>& specs);

}  // namespace troupe::tools
