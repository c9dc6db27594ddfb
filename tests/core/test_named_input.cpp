#include <catch2/catch.hpp>

#include <fstream>
#include <map>
#include <set>

#include "core/data/idx.hpp"
#include "core/data/named_input.hpp"
#include "core/data/record_io.hpp"
#include "core/data/sparse_input.hpp"
#include "core/data/tf_example.hpp"
#include "core/proto_wire.hpp"
#include "helpers.hpp"
#include "idx_files.hpp"
#include "named_input_helpers.hpp"

using namespace troupe::core;
using troupe::test::all;
using troupe::test::idx_bytes;
using troupe::test::options;
using troupe::test::read_error;
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
  // One enum for both pipelines: each names what it cannot read.
  for (DataFormat f : {DataFormat::tfrecord, DataFormat::criteo, DataFormat::csv, DataFormat::idx,
                       DataFormat::libsvm})
    CHECK(parse_data_format(data_format_name(f)).value() == f);
  auto libsvm = check(options(DataFormat::libsvm, {{"x", ColumnKind::floats, {}}}, 3));
  REQUIRE_FALSE(libsvm.ok());
  CHECK_THAT(libsvm.error().message, Catch::Contains("libsvm") && Catch::Contains("ctr_ps"));
  CHECK(parse_sparse_format("libsvm").value() == DataFormat::libsvm);
  CHECK(parse_sparse_format("tfrecord").value() == DataFormat::tfrecord);
  auto csv = parse_sparse_format("csv");
  REQUIRE_FALSE(csv.ok());
  CHECK_THAT(csv.error().message, Catch::Contains("not csv"));
  CHECK_THAT(parse_sparse_format("parquet").error().message, Catch::Contains("'parquet'"));
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
