#pragma once

// Named features of a batch, as a Keras model's inputs and labels want them: each one a
// column of one kind of value (floats, ints or strings) and of shape [batch, ...], filled
// record by record and shaped once the batch is complete.
//
//   std::vector<FeatureSpec> specs = {{"image", ColumnKind::floats, {28, 28}},
//                                     {"label", ColumnKind::ints, {}}};
//   auto columns = make_columns(specs, 64);
//   ExampleDecoder decoder(specs);
//   for (const auto& r : records) decoder.append(r.data, columns).value();
//   finish_columns(columns, specs, records.size());  // image [64, 28, 28], label [64]

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/expected.hpp"
#include "core/tensor.hpp"

namespace troupe::core {

enum class ColumnKind : uint8_t { floats, ints, strings };

/// "floats", "ints" or "strings".
const char* column_kind_name(ColumnKind kind);
/// The kind that holds a Keras / NumPy dtype: float16, bfloat16, float32, float64 ->
/// floats; bool, int8..int64, uint8..uint64 -> ints; string -> strings. Anything else is
/// an invalid_argument error.
Expected<ColumnKind> column_kind_of_dtype(std::string_view dtype);

/// What a model wants of one named feature: its kind and per-example shape ({} for
/// Input(shape=()), {1} for shape=(1,), {28, 28} for shape=(28, 28)).
struct FeatureSpec {
  std::string name;
  ColumnKind kind = ColumnKind::floats;
  std::vector<int64_t> shape;

  /// Values per example: the product of shape (1 for {}).
  int64_t per_example() const;
};

/// Whether specs can make columns: names non-empty and distinct, every dimension at least
/// 1, at most Shape::max_rank - 1 of them (the batch axis comes first). An invalid_argument
/// error naming the spec otherwise.
Status check_specs(const std::vector<FeatureSpec>& specs);

/// One named feature of a batch: shape [batch, ...spec.shape], values of one kind in
/// row-major order (only the vector of its kind is used).
struct Column {
  std::string name;
  ColumnKind kind = ColumnKind::floats;
  Shape shape;
  std::vector<float> floats;
  std::vector<int64_t> ints;
  std::vector<std::string> strings;

  /// Values held, of its kind.
  size_t size() const;
  /// Keeps the first n values.
  void truncate(size_t n);
};

/// Empty columns, one per spec in order, with room for `examples` examples.
std::vector<Column> make_columns(const std::vector<FeatureSpec>& specs, size_t examples);
/// Shapes each column [examples, ...spec.shape]; each must hold examples * per_example
/// values (an invariant of the decoders).
void finish_columns(std::vector<Column>& columns, const std::vector<FeatureSpec>& specs,
                    int64_t examples);

/// Appends one value written as text: floats as a decimal number; ints as a decimal
/// integer (or a number with no fractional part, "3.0"), or base-16 digits when `hex`
/// (Criteo's categorical fields); strings as they are. False when the text is not a number
/// of the column's kind (nothing is appended).
bool append_text(Column& column, std::string_view text, bool hex = false);

/// Decodes serialized tf.train.Example records into the columns of specs, reading each
/// feature by its name straight into its column: int64_list into ints (or floats when the
/// spec wants floats), float_list into floats, bytes_list into strings; each a list of
/// exactly spec.per_example() values. Made once per batch; keeps a reference to specs.
class ExampleDecoder {
 public:
  explicit ExampleDecoder(const std::vector<FeatureSpec>& specs);

  /// Appends one record to `columns` (from make_columns(specs)). Malformed bytes or a list
  /// of another length is data_loss; a missing feature (the error lists the record's
  /// feature names) or a list of a kind the spec cannot hold is invalid_argument. Errors
  /// name the feature, not the record: the caller says where. On an error the columns are
  /// left part-filled.
  Status append(std::string_view bytes, std::vector<Column>& columns);

  /// The feature names of a serialized tf.train.Example, in the order they are written.
  static Expected<std::vector<std::string>> feature_names(std::string_view bytes);

 private:
  const std::vector<FeatureSpec>& specs_;
  std::unordered_map<std::string_view, size_t> index_;
  std::vector<size_t> start_;  // each column's size before the current record
  std::vector<char> seen_;     // whether the current record has set the column
};

/// One example (row `row`) of `columns` as a serialized tf.train.Example: floats as a
/// float_list, ints as an int64_list, strings as a bytes_list, each of the column's
/// per-example length (for writing test data and exports).
std::string encode_tf_example(const std::vector<Column>& columns, int64_t row);

}  // namespace troupe::core
