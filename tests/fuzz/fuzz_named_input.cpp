// Data read by a model's input names (core/data/named_input.hpp, columns.hpp): a
// tf.train.Example decoded straight into named columns, and CSV and Criteo text files read
// by specs. The first byte picks the decoder; the rest is its input. An error or columns,
// never a crash.
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "core/data/guard.hpp"
#include "core/data/named_input.hpp"

namespace {

using namespace troupe::core;

const std::vector<FeatureSpec>& specs() {
  static const std::vector<FeatureSpec> s = {{"ids", ColumnKind::ints, {3}},
                                             {"x", ColumnKind::floats, {}},
                                             {"word", ColumnKind::strings, {}},
                                             {"label", ColumnKind::floats, {}}};
  return s;
}

void read_file(const std::string& bytes, DataFormat format, const std::vector<FeatureSpec>& s) {
  char path[] = "/tmp/troupe-fuzz-named-XXXXXX";
  const int fd = ::mkstemp(path);
  if (fd < 0) return;
  ::close(fd);
  std::ofstream(path, std::ios::binary)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  NamedInputOptions o;
  o.format = format;
  o.features = s;
  o.batch = 4;
  o.drop_remainder = false;
  (void)read_named_batches({path}, o);
  ::unlink(path);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 3) {
    case 0: {
      auto columns = make_columns(specs(), 1);
      ExampleDecoder decoder(specs());
      if (decoder.append(bytes, columns)) finish_columns(columns, specs(), 1);
      (void)ExampleDecoder::feature_names(bytes);
      break;
    }
    case 1:  // text holds one value a feature
      read_file(bytes, DataFormat::csv,
                {{"ids", ColumnKind::ints, {}},
                 {"x", ColumnKind::floats, {}},
                 {"word", ColumnKind::strings, {}},
                 {"label", ColumnKind::floats, {}}});
      break;
    default:
      read_file(bytes, DataFormat::criteo,
                {{"label", ColumnKind::floats, {}},
                 {"I1", ColumnKind::floats, {}},
                 {"C1", ColumnKind::strings, {}},
                 {"C2", ColumnKind::ints, {}}});
  }
  return 0;
}
