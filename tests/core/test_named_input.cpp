#include <catch2/catch.hpp>

#include <zlib.h>

#include <fstream>
#include <map>
#include <set>

#include "core/data/idx.hpp"
#include "core/data/named_input.hpp"
#include "core/data/record_io.hpp"
#include "core/data/tf_example.hpp"
#include "core/proto_wire.hpp"
#include "helpers.hpp"

using namespace troupe::core;
using troupe::test::TempDir;
using troupe::test::write_text;

namespace {

void write_records(const std::string& path, const std::vector<std::string>& records) {
  std::string bytes;
  for (const auto& r : records)
    bytes += frame_record(r);
  write_text(path, bytes);
}

// A tf.train.Example written field by field on proto_wire, independently of the code under
// test: numbers packed as TensorFlow's serializer writes them, or one field per value.
class ExampleWriter {
 public:
  ExampleWriter& floats(const std::string& key, const std::vector<float>& v, bool packed = true) {
    std::string list, p;
    for (float x : v) {
      if (packed) {
        proto::put_le(p, x);
      } else {
        proto::put_key(list, 1, proto::fixed32);
        proto::put_le(list, x);
      }
    }
    if (!p.empty()) proto::put_bytes(list, 1, p);
    return add(key, 2, list);
  }
  ExampleWriter& ints(const std::string& key, const std::vector<int64_t>& v, bool packed = true) {
    std::string list, p;
    for (int64_t x : v) {
      if (packed) {
        proto::put_varint(p, static_cast<uint64_t>(x));
      } else {
        proto::put_key(list, 1, proto::varint);
        proto::put_varint(list, static_cast<uint64_t>(x));
      }
    }
    if (!p.empty()) proto::put_bytes(list, 1, p);
    return add(key, 3, list);
  }
  ExampleWriter& bytes(const std::string& key, const std::vector<std::string>& v) {
    std::string list;
    for (const auto& s : v)
      proto::put_bytes(list, 1, s);
    return add(key, 1, list);
  }
  std::string str() const {
    std::string out;
    proto::put_bytes(out, 1, features_);
    return out;
  }

 private:
  ExampleWriter& add(const std::string& key, uint32_t kind, const std::string& list) {
    std::string feature, entry;
    proto::put_bytes(feature, kind, list);
    proto::put_bytes(entry, 1, key);
    proto::put_bytes(entry, 2, feature);
    proto::put_bytes(features_, 1, entry);
    return *this;
  }
  std::string features_;
};

NamedInputOptions options(DataFormat format, std::vector<FeatureSpec> specs, size_t batch) {
  NamedInputOptions o;
  o.format = format;
  o.features = std::move(specs);
  o.batch = batch;
  o.drop_remainder = false;
  o.epochs = 1;
  o.prefetch = 0;
  return o;
}

// Every batch of one pass, in order.
std::vector<Batch> all(const Dataset<Batch>& ds) {
  std::vector<Batch> out;
  auto it = ds.make_iterator();
  while (auto b = it->next())
    out.push_back(std::move(*b));
  return out;
}

// The error of reading the whole input: what next() throws.
Error read_error(const std::vector<std::string>& files, const NamedInputOptions& o) {
  auto got = read_named_batches(files, o);
  REQUIRE_FALSE(got.ok());
  return got.error();
}

std::vector<char> idx_bytes(std::vector<uint32_t> dims, const std::vector<uint8_t>& data) {
  std::vector<char> b{0, 0, 0x08, static_cast<char>(dims.size())};
  for (uint32_t d : dims)
    for (int s = 24; s >= 0; s -= 8)
      b.push_back(static_cast<char>((d >> s) & 0xff));
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

void write_gz(const std::string& path, const std::vector<char>& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  REQUIRE(f != nullptr);
  REQUIRE(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())) ==
          static_cast<int>(bytes.size()));
  gzclose(f);
}

}  // namespace

TEST_CASE("TFRecord features are read by name into columns of their spec", "[named_input]") {
  TempDir dir;
  std::vector<std::string> records;
  for (int i = 0; i < 5; ++i) {
    const bool packed = i != 3;  // record 3: one field per value
    records.push_back(ExampleWriter()
                          .floats("age", {10.5f + i}, packed)
                          .ints("tokens", {i, 100 + i, -(i + 1)}, packed)
                          .bytes("tags", {"t" + std::to_string(i), ""})
                          .floats("score", {0.25f * i}, packed)
                          .ints("count", {int64_t{1} << 40}, packed)
                          .floats("unused", {1, 2, 3}, packed)
                          .ints("label", {i % 2}, packed)
                          .str());
  }
  write_records(dir.file("a.tfrecord"), records);
  auto o = options(DataFormat::tfrecord,
                   {{"age", ColumnKind::floats, {}},
                    {"tokens", ColumnKind::ints, {3}},
                    {"tags", ColumnKind::strings, {2}},
                    {"score", ColumnKind::floats, {1}},
                    {"count", ColumnKind::floats, {}},
                    {"label", ColumnKind::ints, {}}},
                   2);
  const auto batches = all(named_input({dir.file("a.tfrecord")}, InputContext{}, o));
  REQUIRE(batches.size() == 3);
  int64_t row = 0;
  for (const Batch& b : batches) {
    const int64_t n = row < 4 ? 2 : 1;
    REQUIRE(b.size() == n);
    REQUIRE(b.columns.size() == 6);
    CHECK(b.columns[0].name == "age");  // in the order of the specs
    CHECK(b.column("unused") == nullptr);
    const Column& age = *b.column("age");
    const Column& tokens = *b.column("tokens");
    const Column& tags = *b.column("tags");
    const Column& score = *b.column("score");
    const Column& count = *b.column("count");
    const Column& label = *b.column("label");
    CHECK(age.kind == ColumnKind::floats);
    CHECK(tokens.kind == ColumnKind::ints);
    CHECK(tags.kind == ColumnKind::strings);
    CHECK(age.shape == Shape{n});
    CHECK(tokens.shape == Shape{n, 3});
    CHECK(tags.shape == Shape{n, 2});
    CHECK(score.shape == Shape{n, 1});
    CHECK(label.shape == Shape{n});
    CHECK(tokens.floats.empty());
    CHECK(age.ints.empty());
    for (int64_t j = 0; j < n; ++j, ++row) {
      const auto k = static_cast<size_t>(j);
      CHECK(age.floats[k] == 10.5f + static_cast<float>(row));
      CHECK(tokens.ints[3 * k] == row);
      CHECK(tokens.ints[3 * k + 1] == 100 + row);
      CHECK(tokens.ints[3 * k + 2] == -(row + 1));
      CHECK(tags.strings[2 * k] == "t" + std::to_string(row));
      CHECK(tags.strings[2 * k + 1].empty());
      CHECK(score.floats[k] == 0.25f * static_cast<float>(row));
      CHECK(count.floats[k] == static_cast<float>(int64_t{1} << 40));  // int64_list as floats
      CHECK(label.ints[k] == row % 2);
    }
  }
  CHECK(row == 5);
}

TEST_CASE("Records of the existing encoder and of encode_tf_example read back", "[named_input]") {
  TempDir dir;
  std::vector<std::string> records;
  for (int i = 0; i < 3; ++i) {
    Example e;
    e.label = static_cast<float>(i);
    e.ids = {i, i + 7};
    e.features = {0.5f * i, -1.0f};
    records.push_back(encode_example(e));
  }
  write_records(dir.file("ctr.tfrecord"), records);
  const std::vector<FeatureSpec> specs = {{"label", ColumnKind::floats, {1}},
                                          {"ids", ColumnKind::ints, {2}},
                                          {"dense", ColumnKind::floats, {2}}};
  auto got =
      read_named_batches({dir.file("ctr.tfrecord")}, options(DataFormat::tfrecord, specs, 8));
  REQUIRE(got.ok());
  REQUIRE(got->size() == 1);
  const Batch& b = (*got)[0];
  CHECK(b.column("label")->floats == std::vector<float>{0, 1, 2});
  CHECK(b.column("ids")->ints == std::vector<int64_t>{0, 7, 1, 8, 2, 9});
  CHECK(b.column("dense")->floats == std::vector<float>{0, -1, 0.5f, -1, 1, -1});

  // encode_tf_example writes a batch's rows; they read back to the same columns.
  std::vector<std::string> again;
  for (int64_t r = 0; r < b.size(); ++r)
    again.push_back(encode_tf_example(b.columns, r));
  write_records(dir.file("again.tfrecord"), again);
  auto back =
      read_named_batches({dir.file("again.tfrecord")}, options(DataFormat::tfrecord, specs, 8));
  REQUIRE(back.ok());
  for (size_t k = 0; k < specs.size(); ++k) {
    const Column& c = (*back)[0].columns[k];
    CHECK(c.shape == b.columns[k].shape);
    CHECK(c.floats == b.columns[k].floats);
    CHECK(c.ints == b.columns[k].ints);
  }
}

TEST_CASE("A [batch] input and a [batch, 1] input take the same one value", "[named_input]") {
  TempDir dir;
  write_records(dir.file("a.tfrecord"),
                {ExampleWriter().floats("x", {3}).str(), ExampleWriter().floats("x", {4}).str()});
  write_text(dir.file("a.csv"), "x\n3\n4\n");
  for (auto format : {DataFormat::tfrecord, DataFormat::csv}) {
    const std::string file = dir.file(format == DataFormat::csv ? "a.csv" : "a.tfrecord");
    auto flat = read_named_batches({file}, options(format, {{"x", ColumnKind::floats, {}}}, 2));
    auto one = read_named_batches({file}, options(format, {{"x", ColumnKind::floats, {1}}}, 2));
    REQUIRE(flat.ok());
    REQUIRE(one.ok());
    CHECK((*flat)[0].columns[0].shape == Shape{2});
    CHECK((*one)[0].columns[0].shape == Shape{2, 1});
    CHECK((*flat)[0].columns[0].floats == std::vector<float>{3, 4});
    CHECK((*one)[0].columns[0].floats == std::vector<float>{3, 4});
  }
}

TEST_CASE("TFRecord errors name the feature, the file and the record", "[named_input]") {
  TempDir dir;
  const std::string path = dir.file("bad.tfrecord");
  const std::string good = ExampleWriter().floats("x", {1, 2}).ints("label", {1}).str();
  const std::string frame0 = frame_record(good);

  SECTION("a missing feature lists the record's features") {
    write_records(path, {good, ExampleWriter().floats("x", {1, 2}).ints("y", {0}).str()});
    auto e = read_error(
        {path}, options(DataFormat::tfrecord,
                        {{"x", ColumnKind::floats, {2}}, {"label", ColumnKind::ints, {}}}, 4));
    CHECK(e.code == Errc::invalid_argument);
    CHECK_THAT(e.message,
               Catch::Contains(path + ": record 1 at offset " + std::to_string(frame0.size())));
    CHECK_THAT(e.message, Catch::Contains("no feature 'label'"));
    CHECK_THAT(e.message, Catch::Contains("the record has: x, y"));
  }
  SECTION("a list of another length") {
    write_records(path, {good, ExampleWriter().floats("x", {1, 2, 3}).ints("label", {1}).str()});
    auto e = read_error({path}, options(DataFormat::tfrecord, {{"x", ColumnKind::floats, {2}}}, 4));
    CHECK(e.code == Errc::data_loss);
    CHECK_THAT(e.message, Catch::Contains(path + ": record 1"));
    CHECK_THAT(e.message, Catch::Contains("feature 'x' holds 3 values; the model wants 2"));
  }
  SECTION("floats where the model wants ints, and numbers where it wants strings") {
    write_records(path, {good});
    auto e = read_error({path}, options(DataFormat::tfrecord, {{"x", ColumnKind::ints, {2}}}, 4));
    CHECK(e.code == Errc::invalid_argument);
    CHECK_THAT(e.message, Catch::Contains("feature 'x' is a float_list; the model wants ints"));
    e = read_error({path}, options(DataFormat::tfrecord, {{"label", ColumnKind::strings, {}}}, 4));
    CHECK_THAT(e.message, Catch::Contains("feature 'label' is a int64_list"));
  }
  SECTION("a truncated file, thrown from next() through prefetch") {
    write_text(path, frame0 + frame0.substr(0, frame0.size() - 3));
    auto o = options(DataFormat::tfrecord, {{"x", ColumnKind::floats, {2}}}, 1);
    o.prefetch = 2;
    auto it = named_input({path}, InputContext{}, o).make_iterator();
    auto first = it->next();
    REQUIRE(first);
    CHECK(first->column("x")->floats == std::vector<float>{1, 2});
    try {
      it->next();
      FAIL("no error for a truncated record");
    } catch (const BadExpectedAccess& e) {
      CHECK(e.error().code == Errc::data_loss);
      CHECK_THAT(e.error().message, Catch::Contains(path + ": record 1"));
      CHECK_THAT(e.error().message, Catch::Contains("truncated"));
    }
  }
  SECTION("bytes that are not a tf.train.Example") {
    write_records(path, {std::string("\x0a\x7f", 2)});
    auto e = read_error({path}, options(DataFormat::tfrecord, {{"x", ColumnKind::floats, {2}}}, 4));
    CHECK(e.code == Errc::data_loss);
    CHECK_THAT(e.message, Catch::Contains(path + ": record 0 at offset 0: tf.train.Example"));
  }
}

TEST_CASE("Criteo lines are read by the names label, I1..I13, C1..C26", "[named_input]") {
  TempDir dir;
  const std::string path = dir.file("day.txt");
  auto line = [](int label, const std::string& i1, const std::string& i2, const std::string& c1,
                 const std::string& c2) {
    std::string s = std::to_string(label) + "\t" + i1 + "\t" + i2;
    for (int i = 3; i <= 13; ++i)
      s += "\t" + std::to_string(i);
    s += "\t" + c1 + "\t" + c2;
    for (int c = 3; c <= 26; ++c)
      s += "\t";  // C3..C26 empty
    return s + "\n";
  };
  write_text(path,
             line(1, "5", "-3", "68fd1e64", "80e26c9b") + "\n" + line(0, "", "7", "", "0000000f"));
  auto o = options(DataFormat::criteo,
                   {{"I1", ColumnKind::floats, {}},
                    {"I2", ColumnKind::ints, {1}},
                    {"I13", ColumnKind::floats, {}},
                    {"C1", ColumnKind::strings, {}},
                    {"C2", ColumnKind::ints, {}},
                    {"C26", ColumnKind::ints, {}},
                    {"C3", ColumnKind::strings, {}},
                    {"label", ColumnKind::ints, {}}},
                   8);
  auto got = read_named_batches({path}, o);
  REQUIRE(got.ok());
  REQUIRE(got->size() == 1);
  const Batch& b = (*got)[0];
  CHECK(b.size() == 2);                                       // the blank line is no example
  CHECK(b.column("I1")->floats == std::vector<float>{5, 0});  // empty: 0
  CHECK(b.column("I2")->ints == std::vector<int64_t>{-3, 7});
  CHECK(b.column("I2")->shape == Shape{2, 1});
  CHECK(b.column("I13")->floats == std::vector<float>{13, 13});
  CHECK(b.column("C1")->strings == std::vector<std::string>{"68fd1e64", ""});
  CHECK(b.column("C2")->ints == std::vector<int64_t>{0x80e26c9b, 15});
  CHECK(b.column("C26")->ints == std::vector<int64_t>{0, 0});
  CHECK(b.column("C3")->strings == std::vector<std::string>{"", ""});
  CHECK(b.column("label")->ints == std::vector<int64_t>{1, 0});

  auto e = read_error({path}, options(DataFormat::criteo, {{"I14", ColumnKind::floats, {}}}, 8));
  CHECK(e.code == Errc::invalid_argument);
  CHECK_THAT(e.message, Catch::Contains("no feature 'I14' (the data has: label, I1, I2"));
  CHECK_THAT(e.message, Catch::Contains("C26)"));
  e = read_error({path}, options(DataFormat::criteo, {{"C1", ColumnKind::floats, {}}}, 8));
  CHECK_THAT(e.message, Catch::Contains("ints (from hex) or strings"));

  write_text(path, line(1, "x5", "1", "a", "b"));
  e = read_error({path}, options(DataFormat::criteo, {{"I1", ColumnKind::floats, {}}}, 8));
  CHECK(e.code == Errc::data_loss);
  CHECK_THAT(e.message, Catch::Contains(path + ":1 at offset 0: feature 'I1' ('x5')"));
  write_text(path, "1\t2\t3\n");
  e = read_error({path}, options(DataFormat::criteo, {{"I1", ColumnKind::floats, {}}}, 8));
  CHECK_THAT(e.message, Catch::Contains("3 fields where criteo has 40"));
}

TEST_CASE("CSV columns are read by the header's names", "[named_input]") {
  TempDir dir;
  // Two files with the columns in different orders: each file's header places them.
  write_text(dir.file("a.csv"),
             "id,name,price,qty\n"
             "1,plain,2.5,3\n"
             "2, \"a, \"\"quoted\"\" one\" ,-1e2, 4.0\n"
             "\n");
  write_text(dir.file("b.csv"), "qty;\"price\";name;id\r\n7;0.125;last;3\r\n");
  const std::vector<FeatureSpec> specs = {{"name", ColumnKind::strings, {}},
                                          {"price", ColumnKind::floats, {}},
                                          {"qty", ColumnKind::ints, {1}},
                                          {"id", ColumnKind::floats, {}}};
  auto got = read_named_batches({dir.file("a.csv")}, options(DataFormat::csv, specs, 8));
  REQUIRE(got.ok());
  REQUIRE(got->size() == 1);
  const Batch& b = (*got)[0];
  CHECK(b.size() == 2);
  CHECK(b.column("name")->strings == std::vector<std::string>{"plain", "a, \"quoted\" one"});
  CHECK(b.column("price")->floats == std::vector<float>{2.5f, -100.0f});
  CHECK(b.column("qty")->ints == std::vector<int64_t>{3, 4});  // "4.0": a whole number
  CHECK(b.column("qty")->shape == Shape{2, 1});
  CHECK(b.column("id")->floats == std::vector<float>{1, 2});

  auto o = options(DataFormat::csv, specs, 8);
  o.csv_delimiter = ';';
  got = read_named_batches({dir.file("b.csv")}, o);
  REQUIRE(got.ok());
  CHECK((*got)[0].column("name")->strings == std::vector<std::string>{"last"});
  CHECK((*got)[0].column("price")->floats == std::vector<float>{0.125f});
  CHECK((*got)[0].column("qty")->ints == std::vector<int64_t>{7});

  write_text(dir.file("empty.csv"), "");  // no header, no examples: nothing to read
  got = read_named_batches({dir.file("empty.csv")}, options(DataFormat::csv, specs, 8));
  REQUIRE(got.ok());
  CHECK(got->empty());

  SECTION("an unparsable number names the feature, the file and the line") {
    write_text(dir.file("c.csv"), "id,name,price,qty\n1,x,2,3\n2,y,two,3\n");
    auto e = read_error({dir.file("c.csv")}, options(DataFormat::csv, specs, 8));
    CHECK(e.code == Errc::data_loss);
    CHECK_THAT(e.message, Catch::Contains(dir.file("c.csv") + ":3 at offset 26: feature 'price' "
                                                              "('two') is not a number"));
    write_text(dir.file("c.csv"), "id,name,price,qty\n1,x,2,3.5\n");
    e = read_error({dir.file("c.csv")}, options(DataFormat::csv, specs, 8));
    CHECK_THAT(e.message, Catch::Contains("feature 'qty' ('3.5') is not an integer"));
  }
  SECTION("a column the header lacks, a line of another width, an open quote") {
    auto e = read_error({dir.file("a.csv")},
                        options(DataFormat::csv, {{"weight", ColumnKind::floats, {}}}, 8));
    CHECK(e.code == Errc::invalid_argument);
    CHECK_THAT(e.message,
               Catch::Contains(dir.file("a.csv") + ": no feature 'weight' (the data has: id, name, "
                                                   "price, qty)"));
    write_text(dir.file("c.csv"), "id,name,price,qty\n1,x,2\n");
    e = read_error({dir.file("c.csv")}, options(DataFormat::csv, specs, 8));
    CHECK(e.code == Errc::data_loss);
    CHECK_THAT(e.message, Catch::Contains(":2 at offset 18: 3 fields where the header names 4"));
    write_text(dir.file("c.csv"), "id,name,price,qty\n1,\"x,2,3\n");
    e = read_error({dir.file("c.csv")}, options(DataFormat::csv, specs, 8));
    CHECK_THAT(e.message, Catch::Contains("field 2 opens a quote that the line does not close"));
  }
  SECTION("shapes a text field cannot fill are refused up front") {
    auto e = read_error({dir.file("a.csv")},
                        options(DataFormat::csv, {{"price", ColumnKind::floats, {3}}}, 8));
    CHECK(e.code == Errc::invalid_argument);
    CHECK_THAT(e.message, Catch::Contains("a csv field holds one value"));
  }
}

TEST_CASE("Two workers read every example once, by file or by record", "[named_input]") {
  TempDir dir;
  std::vector<std::string> tf_files, csv_files;
  int id = 0;
  for (int f = 0; f < 4; ++f) {
    std::vector<std::string> records;
    std::string csv = "label,id\n";
    for (int i = 0; i < 5; ++i, ++id) {
      records.push_back(ExampleWriter().ints("id", {id}).str());
      csv += "0," + std::to_string(id) + "\n";
    }
    tf_files.push_back(dir.file("part-" + std::to_string(f) + ".tfrecord"));
    write_records(tf_files.back(), records);
    csv_files.push_back(dir.file("part-" + std::to_string(f) + ".csv"));
    write_text(csv_files.back(), csv);
  }
  auto ids_of = [](const std::vector<std::string>& files, DataFormat format, int64_t worker) {
    auto o = options(format, {{"id", ColumnKind::ints, {}}}, 3);
    o.shuffle_buffer = 4;
    o.prefetch = 1;
    InputContext ctx;
    ctx.num_input_pipelines = 2;
    ctx.input_pipeline_id = worker;
    std::multiset<int64_t> out;
    for (const Batch& b : all(named_input(files, ctx, o)))
      out.insert(b.column("id")->ints.begin(), b.column("id")->ints.end());
    return out;
  };
  for (auto format : {DataFormat::tfrecord, DataFormat::csv}) {
    const auto& files = format == DataFormat::csv ? csv_files : tf_files;
    for (size_t nfiles : {size_t{4}, size_t{1}}) {  // by file; by record of one file
      INFO(data_format_name(format) << " over " << nfiles << " files");
      const std::vector<std::string> some(files.begin(), files.begin() + nfiles);
      const auto a = ids_of(some, format, 0), b = ids_of(some, format, 1);
      std::multiset<int64_t> both(a);
      both.insert(b.begin(), b.end());
      std::multiset<int64_t> want;
      for (int64_t i = 0; i < static_cast<int64_t>(5 * nfiles); ++i)
        want.insert(i);
      CHECK(both == want);
      CHECK(!a.empty());
      CHECK(!b.empty());
    }
  }
}

TEST_CASE("IDX files read as image and label, sharded by example", "[named_input]") {
  TempDir dir;
  std::vector<uint8_t> pixels(5 * 2 * 3), labels{9, 1, 0, 255, 4};
  for (size_t i = 0; i < pixels.size(); ++i)
    pixels[i] = static_cast<uint8_t>(i * 8);
  write_gz(dir.file("images.gz"), idx_bytes({5, 2, 3}, pixels));
  troupe::test::write_bytes(dir.file("labels.idx"), idx_bytes({5}, labels));
  const std::vector<std::string> files = {dir.file("labels.idx"), dir.file("images.gz")};

  auto got = read_named_batches(
      files, options(DataFormat::idx,
                     {{"image", ColumnKind::floats, {2, 3}}, {"label", ColumnKind::ints, {}}}, 2));
  REQUIRE(got.ok());
  REQUIRE(got->size() == 3);
  std::vector<float> all_pixels;
  std::vector<int64_t> all_labels;
  for (const Batch& b : *got) {
    CHECK(b.column("image")->shape == Shape{b.size(), 2, 3});
    all_pixels.insert(all_pixels.end(), b.column("image")->floats.begin(),
                      b.column("image")->floats.end());
    all_labels.insert(all_labels.end(), b.column("label")->ints.begin(),
                      b.column("label")->ints.end());
  }
  CHECK(all_pixels == std::vector<float>(pixels.begin(), pixels.end()));  // raw, unscaled
  CHECK(all_labels == std::vector<int64_t>{9, 1, 0, 255, 4});

  // Another shape of the same values, and ints.
  got = read_named_batches(files, options(DataFormat::idx, {{"image", ColumnKind::ints, {6}}}, 5));
  REQUIRE(got.ok());
  CHECK((*got)[0].column("image")->shape == Shape{5, 6});
  CHECK((*got)[0].column("image")->ints[7] == 56);

  // Two workers: every other example each.
  std::vector<int64_t> seen;
  for (int64_t w = 0; w < 2; ++w) {
    InputContext ctx;
    ctx.num_input_pipelines = 2;
    ctx.input_pipeline_id = w;
    auto o = options(DataFormat::idx, {{"label", ColumnKind::ints, {1}}}, 8);
    const auto batches = all(named_input(files, ctx, o));
    REQUIRE(batches.size() == 1);
    const auto& ints = batches[0].column("label")->ints;
    CHECK(ints == (w == 0 ? std::vector<int64_t>{9, 0, 4} : std::vector<int64_t>{1, 255}));
  }

  auto e = read_error(files, options(DataFormat::idx, {{"pixels", ColumnKind::floats, {6}}}, 2));
  CHECK(e.code == Errc::invalid_argument);
  CHECK_THAT(e.message, Catch::Contains("no feature 'pixels' (the data has: label, image)"));
  e = read_error({files[1]}, options(DataFormat::idx, {{"label", ColumnKind::ints, {}}}, 2));
  CHECK_THAT(e.message, Catch::Contains("no feature 'label' (the data has: image)"));
  e = read_error(files, options(DataFormat::idx, {{"image", ColumnKind::floats, {28, 28}}}, 2));
  CHECK_THAT(e.message, Catch::Contains("of 784 values; the images hold 6"));
  troupe::test::write_bytes(dir.file("labels.idx"), idx_bytes({4}, {1, 2, 3, 4}));
  e = read_error(files, options(DataFormat::idx, {{"label", ColumnKind::ints, {}}}, 2));
  CHECK(e.code == Errc::data_loss);
  CHECK_THAT(e.message, Catch::Contains("holds 5 examples but " + files[0] + " holds 4"));
}

TEST_CASE("Fashion-MNIST's installed files read as image and label", "[named_input]") {
  const std::string images = std::string(fashion_mnist_dir) + "/t10k-images-idx3-ubyte.gz";
  const std::string labels = std::string(fashion_mnist_dir) + "/t10k-labels-idx1-ubyte.gz";
  auto raw_images = read_idx(images);
  auto raw_labels = read_idx(labels);
  REQUIRE(raw_images.ok());
  REQUIRE(raw_labels.ok());
  auto o =
      options(DataFormat::idx,
              {{"image", ColumnKind::floats, {28, 28, 1}}, {"label", ColumnKind::ints, {}}}, 1000);
  o.prefetch = 2;
  int64_t seen = 0;
  auto it = named_input({images, labels}, InputContext{}, o).make_iterator();
  while (auto b = it->next()) {
    const Column& image = *b->column("image");
    REQUIRE(image.shape == Shape{1000, 28, 28, 1});
    // Spot checks against the reader's bytes: rows of this batch's first and last example.
    for (int64_t row : {int64_t{0}, int64_t{999}}) {
      const int64_t example = seen + row;
      for (int64_t p = 0; p < 784; p += 13)
        REQUIRE(image.floats[static_cast<size_t>(row * 784 + p)] ==
                static_cast<float>(raw_images->data[static_cast<size_t>(example * 784 + p)]));
      REQUIRE(b->column("label")->ints[static_cast<size_t>(row)] ==
              raw_labels->data[static_cast<size_t>(example)]);
    }
    seen += b->size();
  }
  CHECK(seen == 10000);
  // The first test image is an ankle boot (class 9); its pixels are raw 0..255.
  CHECK(raw_labels->data[0] == 9);
  auto first = read_named_batches(
      {images, labels}, options(DataFormat::idx, {{"image", ColumnKind::floats, {784}}}, 1));
  REQUIRE(first.ok());
  const auto& px = (*first)[0].column("image")->floats;
  auto examples = load_fashion_mnist(fashion_mnist_dir, "t10k");
  REQUIRE(examples.ok());
  float peak = 0;
  for (size_t p = 0; p < 784; ++p) {
    REQUIRE(px[p] / 255.0f == Approx((*examples)[0].features[p]));
    peak = std::max(peak, px[p]);
  }
  CHECK(peak > 1.0f);
}

TEST_CASE("feature_names says what a file offers", "[named_input]") {
  TempDir dir;
  write_records(dir.file("a.tfrecord"),
                {ExampleWriter().floats("b", {1}).ints("a", {2}).bytes("c", {"x"}).str()});
  write_text(dir.file("a.csv"), "x, \"y,z\" ,label\n1,2,3\n");
  write_text(dir.file("empty.tfrecord"), "");
  troupe::test::write_bytes(dir.file("l.idx"), idx_bytes({2}, {0, 1}));
  troupe::test::write_bytes(dir.file("i.idx"), idx_bytes({1, 1, 2}, {0, 1}));

  auto names = feature_names(dir.file("a.tfrecord"), DataFormat::tfrecord);
  REQUIRE(names.ok());
  CHECK(*names == std::vector<std::string>{"b", "a", "c"});
  names = feature_names(dir.file("a.csv"), DataFormat::csv);
  REQUIRE(names.ok());
  CHECK(*names == std::vector<std::string>{"x", "y,z", "label"});
  names = feature_names(dir.file("a.csv"), DataFormat::criteo);
  REQUIRE(names.ok());
  REQUIRE(names->size() == 40);
  CHECK(names->at(13) == "I13");
  CHECK(names->at(14) == "C1");
  CHECK(*feature_names(dir.file("l.idx"), DataFormat::idx) == std::vector<std::string>{"label"});
  CHECK(*feature_names(dir.file("i.idx"), DataFormat::idx) == std::vector<std::string>{"image"});
  CHECK(feature_names(dir.file("empty.tfrecord"), DataFormat::tfrecord).error().code ==
        Errc::invalid_argument);
  CHECK(feature_names(dir.file("none.csv"), DataFormat::csv).error().code == Errc::not_found);
}

TEST_CASE("Evaluation batches keep order and the remainder, and options are checked",
          "[named_input]") {
  TempDir dir;
  std::vector<std::string> records;
  for (int i = 0; i < 7; ++i)
    records.push_back(ExampleWriter().floats("x", {static_cast<float>(i)}).str());
  write_records(dir.file("eval.tfrecord"), records);
  auto got = read_named_batches({dir.file("eval.tfrecord")},
                                options(DataFormat::tfrecord, {{"x", ColumnKind::floats, {}}}, 3));
  REQUIRE(got.ok());
  REQUIRE(got->size() == 3);
  CHECK((*got)[0].column("x")->floats == std::vector<float>{0, 1, 2});
  CHECK((*got)[2].column("x")->floats == std::vector<float>{6});

  // Two epochs with a shuffle: each pass a permutation.
  auto o = options(DataFormat::tfrecord, {{"x", ColumnKind::floats, {}}}, 2);
  o.epochs = 2;
  o.shuffle_buffer = 7;
  o.cache = true;
  std::multiset<float> xs;
  for (const Batch& b : all(named_input({dir.file("eval.tfrecord")}, InputContext{}, o)))
    xs.insert(b.column("x")->floats.begin(), b.column("x")->floats.end());
  CHECK(xs == std::multiset<float>{0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6});

  for (const auto& specs : std::vector<std::vector<FeatureSpec>>{
           {},
           {{"", ColumnKind::floats, {}}},
           {{"x", ColumnKind::floats, {0}}},
           {{"x", ColumnKind::floats, {}}, {"x", ColumnKind::ints, {}}}}) {
    auto e = read_error({dir.file("eval.tfrecord")}, options(DataFormat::tfrecord, specs, 3));
    CHECK(e.code == Errc::invalid_argument);
  }
  CHECK(check(options(DataFormat::idx, {{"image", ColumnKind::strings, {784}}}, 3)).ok() == false);
  CHECK(parse_data_format("csv").value() == DataFormat::csv);
  CHECK_FALSE(parse_data_format("parquet").ok());
  CHECK(column_kind_of_dtype("float32").value() == ColumnKind::floats);
  CHECK(column_kind_of_dtype("int64").value() == ColumnKind::ints);
  CHECK(column_kind_of_dtype("string").value() == ColumnKind::strings);
  CHECK_FALSE(column_kind_of_dtype("complex64").ok());
}

TEST_CASE("Batch::size counts the examples of a batch of columns", "[named_input]") {
  Batch legacy;
  legacy.labels = {1, 0, 1};
  CHECK(legacy.size() == 3);
  CHECK(Batch{}.size() == 0);
  std::vector<FeatureSpec> specs = {{"t", ColumnKind::ints, {2}}};
  auto columns = make_columns(specs, 4);
  columns[0].ints = {1, 2, 3, 4, 5, 6, 7, 8};
  finish_columns(columns, specs, 4);
  Batch named;
  named.columns = std::move(columns);
  CHECK(named.size() == 4);
  CHECK(named.column("t")->shape == Shape{4, 2});
}
