#pragma once

#include <string>
#include <vector>

#include "core/data/example.hpp"
#include "core/expected.hpp"

namespace troupe::core {

/// Reads a LibSVM file: one example a line, `label index:value index:value ...`, indices
/// ascending integers, '#' starts a comment. A malformed line is a data_loss error naming
/// the file, the line and the byte offset.
Expected<std::vector<Example>> read_libsvm(const std::string& path);

struct CsvOptions {
  char delimiter = ',';
  bool header = true;     // the first line names the columns and is skipped
  int label_column = -1;  // the column holding the label; negative counts from the end
};

/// Reads a numeric CSV file into dense examples; every line needs the same number of
/// fields. A field that is not a number is a data_loss error naming file, line, column and
/// byte offset.
Expected<std::vector<Example>> read_csv(const std::string& path, const CsvOptions& options = {});

}  // namespace troupe::core
