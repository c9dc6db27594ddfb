#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/data/example.hpp"
#include "core/data/record_io.hpp"
#include "core/expected.hpp"

namespace troupe::core {

/// Reads a LibSVM file: one example a line, `label index:value index:value ...`, indices
/// ascending integers, '#' starts a comment. A malformed line is a data_loss error naming
/// the file, the line and the byte offset.
Expected<std::vector<Example>> read_libsvm(const std::string& path);
/// One LibSVM line into `out` (fresh); false for a blank or comment-only line.
Expected<bool> parse_libsvm_line(const RawRecord& line, Example& out);

struct CsvOptions {
  char delimiter = ',';
  bool header = true;     // the first line names the columns and is skipped
  int label_column = -1;  // the column holding the label; negative counts from the end
};

/// The Criteo display-advertising format (Kaggle's train.txt): per line, tab-separated, a
/// label (0 or 1), 13 integer features and 26 categorical features (hex strings); any
/// feature may be empty (missing).
struct CriteoOptions {
  /// Hash buckets per categorical field: field f's value lands in
  /// [f * buckets, (f + 1) * buckets), as a hashed categorical column with one embedding
  /// table offset per field. A missing value hashes as the empty string.
  int64_t buckets_per_field = 1 << 20;
  /// Instead of buckets: each value's 64-bit key, categorical_key(field, value), for
  /// dynamic tables (no fixed vocabulary; buckets_per_field unused).
  bool raw_keys = false;
  /// A fixed table's rows from TFRecord ids (ctr_datagen --raw-ids writes raw keys): an id
  /// that is no row of the 26 fields' buckets, [0, 26 * buckets_per_field), is a raw key,
  /// hashed into the buckets of its field (key_bucket), the k-th of a record's 26 ids being
  /// field k's. So hashed and dynamic tables train on the same files. Ids already rows stay.
  bool bucket_tfrecord_keys = false;
};
inline constexpr int criteo_integer_fields = 13;
inline constexpr int criteo_categorical_fields = 26;

/// The bucket of a categorical value in its field (64-bit FNV-1a of its bytes, modulo
/// `buckets`). Not TensorFlow's FarmHash: data hashed here is trained here.
int64_t hash_bucket(std::string_view value, int64_t buckets);
/// A categorical value's key in a table without a fixed vocabulary: 64-bit FNV-1a of the
/// field's number and the value's bytes, so equal values of different fields are different
/// keys (and 10^9 distinct values collide with probability about 3%).
int64_t categorical_key(int field, std::string_view value);
/// The bucket of a raw 64-bit key (a key of categorical_key or the user's own ids, which
/// may be sequential): mixed first, so that every bit of the key counts, then modulo
/// `buckets`.
int64_t key_bucket(int64_t key, int64_t buckets);

/// Reads a Criteo-format file: dense features log(1 + max(x, 0)) of the 13 integers
/// (missing: 0), sparse ids one per categorical field (values empty: all ones), the label.
/// A line with another field count, a field that is not an integer, or a label other than
/// 0/1 is a data_loss error naming file, line, field and byte offset.
Expected<std::vector<Example>> read_criteo(const std::string& path,
                                           const CriteoOptions& options = {});
/// Whether the options are usable (buckets_per_field in [1, 2^56 / 26]).
Status check(const CriteoOptions& options);
/// One Criteo line into `out`; false for an empty line. Errors as read_criteo's.
Expected<bool> parse_criteo_line(const RawRecord& line, const CriteoOptions& options, Example& out);

/// Reads a numeric CSV file into dense examples; every line needs the same number of
/// fields. A field that is not a number is a data_loss error naming file, line, column and
/// byte offset.
Expected<std::vector<Example>> read_csv(const std::string& path, const CsvOptions& options = {});

}  // namespace troupe::core
