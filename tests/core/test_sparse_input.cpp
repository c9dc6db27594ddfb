#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <fstream>
#include <functional>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "core/data/record_io.hpp"
#include "core/data/sparse_input.hpp"
#include "core/data/tf_example.hpp"
#include "core/proto_wire.hpp"
#include "fifo_feeder.hpp"
#include "helpers.hpp"

using namespace troupe::core;
using troupe::test::TempDir;
using troupe::test::write_text;

namespace {

Example example(float label, std::vector<int64_t> ids, std::vector<float> values,
                std::vector<float> dense) {
  Example e;
  e.label = label;
  e.ids = std::move(ids);
  e.values = std::move(values);
  e.features = std::move(dense);
  return e;
}

void write_tfrecords(const std::string& path, const std::vector<Example>& examples) {
  std::string bytes;
  for (const auto& e : examples)
    bytes += frame_record(encode_example(e));
  write_text(path, bytes);
}

// Every record of every iterator pass, as labels (each test example has a unique label).
std::multiset<float> labels_of(const Dataset<Batch>& ds) {
  std::multiset<float> out;
  auto it = ds.make_iterator();
  while (auto b = it->next())
    out.insert(b->labels.begin(), b->labels.end());
  return out;
}

}  // namespace

TEST_CASE("line reader: offsets, CRLF, a last line without newline, and a line cap", "[records]") {
  TempDir dir;
  write_text(dir.file("t"), "ab\r\n\nxyz");
  auto r = LineReader::open(dir.file("t"));
  REQUIRE(r.ok());
  RawRecord rec;
  std::vector<std::tuple<std::string, int64_t, int64_t>> got;
  while (r->next(rec).value())
    got.emplace_back(rec.data, rec.index, rec.offset);
  CHECK(got == std::vector<std::tuple<std::string, int64_t, int64_t>>{
                   {"ab", 1, 0}, {"", 2, 4}, {"xyz", 3, 5}});

  // Lines longer than the buffer's first size still come whole.
  const std::string long_line(200000, 'q');
  write_text(dir.file("long"), "x\n" + long_line + "\ny\n");
  r = LineReader::open(dir.file("long"), 1 << 20);
  REQUIRE(r->next(rec).value());
  REQUIRE(r->next(rec).value());
  CHECK(rec.data == long_line);
  CHECK(rec.offset == 2);
  REQUIRE(r->next(rec).value());
  CHECK(rec.data == "y");
  // Over the cap: an error naming the line, not a buffer the size of the file.
  r = LineReader::open(dir.file("long"), 4096);
  REQUIRE(r->next(rec).value());
  auto bad = r->next(rec);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().message.find(dir.file("long") + ":2: line longer than 4096 bytes") !=
        std::string::npos);
}

TEST_CASE("tf.train.Example round trip, unpacked lists, int64 labels, malformed bytes",
          "[records]") {
  const Example e = example(1.0f, {3, 70000000000, 0}, {0.5f, 1.0f, -2.0f}, {0.25f, 4.0f});
  auto back = parse_example(encode_example(e));
  REQUIRE(back.ok());
  CHECK(back->label == 1.0f);
  CHECK(back->ids == e.ids);
  CHECK(back->values == e.values);
  CHECK(back->features == e.features);

  // Written by another writer: unpacked int64s, an int64 label, an unknown feature first.
  using namespace troupe::core::proto;
  auto feature_entry = [](const std::string& key, uint32_t kind, const std::string& list) {
    std::string feature, entry;
    put_bytes(feature, kind, list);
    put_bytes(entry, 1, key);
    put_bytes(entry, 2, feature);
    return entry;
  };
  std::string ids_list, label_list, other;
  for (uint64_t id : {9u, 4u}) {
    put_key(ids_list, 1, varint);
    put_varint(ids_list, id);
  }
  put_key(label_list, 1, varint);
  put_varint(label_list, 0);
  put_bytes(other, 1, "abc");
  std::string features;
  put_bytes(features, 1, feature_entry("name", 1, other));
  put_bytes(features, 1, feature_entry("ids", 3, ids_list));
  put_bytes(features, 1, feature_entry("label", 3, label_list));
  std::string bytes;
  put_bytes(bytes, 1, features);
  auto parsed = parse_example(bytes);
  REQUIRE(parsed.ok());
  CHECK(parsed->ids == std::vector<int64_t>{9, 4});
  CHECK(parsed->label == 0.0f);
  CHECK(parsed->values.empty());

  // Missing label, wrong kinds, mismatched values.
  Example no_values = e;
  no_values.values = {1.0f};
  CHECK(parse_example(encode_example(no_values)).error().message.find("1 'values' for 3 'ids'") !=
        std::string::npos);
  std::string only_ids;
  put_bytes(only_ids, 1, feature_entry("ids", 3, ids_list));
  std::string no_label;
  put_bytes(no_label, 1, only_ids);
  CHECK(parse_example(no_label).error().message.find("no 'label'") != std::string::npos);
  std::string one_float, float_ids;
  put_bytes(one_float, 1, std::string(4, '\0'));
  put_bytes(float_ids, 1, feature_entry("ids", 2, one_float));
  std::string wrong;
  put_bytes(wrong, 1, float_ids);
  CHECK(parse_example(wrong).error().message.find("'ids' is not an int64 list") !=
        std::string::npos);

  // Every cut of a good record and random bytes: an error or an example, never a crash.
  const std::string good = encode_example(e);
  for (size_t cut = 0; cut < good.size(); ++cut)
    (void)parse_example(std::string_view(good).substr(0, cut));
  std::mt19937 rng(7);
  for (int i = 0; i < 2000; ++i) {
    std::string junk = good;
    for (int k = 0; k < 3; ++k)
      junk[rng() % junk.size()] = static_cast<char>(rng());
    (void)parse_example(junk);
  }
}

TEST_CASE("A fixed table hashes TFRecord raw keys into their field's buckets and keeps rows",
          "[records]") {
  constexpr int64_t buckets = 1000;
  std::vector<int64_t> ids(criteo_categorical_fields);
  for (int k = 0; k < criteo_categorical_fields; ++k)
    ids[static_cast<size_t>(k)] = k % 2 == 0 ? categorical_key(k, "v" + std::to_string(k))
                                             : k * buckets + 7;  // already a row
  ids[4] = 12345;                  // a user's small sequential key: a row of the table, kept as one
  ids[6] = -1;                     // negative: a key
  ids[8] = int64_t{26} * buckets;  // one past the last row: a key
  RawRecord r;
  r.data = encode_example(example(1.0f, ids, {}, {}));
  CriteoOptions o;
  o.buckets_per_field = buckets;

  // Without the option, the ids are the record's.
  auto plain = parse_batch({r}, DataFormat::tfrecord, o);
  REQUIRE(plain.ok());
  CHECK(plain->ids == ids);

  o.bucket_tfrecord_keys = true;
  auto batch = parse_batch({r, r}, DataFormat::tfrecord, o);
  REQUIRE(batch.ok());
  REQUIRE(batch->ids.size() == 2 * ids.size());
  for (size_t k = 0; k < ids.size(); ++k) {
    INFO("field " << k);
    const int64_t id = batch->ids[k];
    CHECK(batch->ids[ids.size() + k] == id);  // the same key, the same row
    if (ids[k] >= 0 && ids[k] < 26 * buckets) {
      CHECK(id == ids[k]);
    } else {
      CHECK(id == static_cast<int64_t>(k) * buckets + key_bucket(ids[k], buckets));
      CHECK(id >= static_cast<int64_t>(k) * buckets);
      CHECK(id < static_cast<int64_t>(k + 1) * buckets);
    }
  }
  // The held-out reader maps them alike.
  TempDir dir;
  write_text(dir.file("h.tfrecord"), frame_record(r.data));
  auto read = read_examples(dir.file("h.tfrecord"), DataFormat::tfrecord, o);
  REQUIRE(read.ok());
  REQUIRE(read->size() == 1);
  CHECK(std::equal(read->front().ids.begin(), read->front().ids.end(), batch->ids.begin()));
  // Keys spread over the buckets: 20000 keys of one field fill most of 1000 buckets.
  std::set<int64_t> used;
  for (int v = 0; v < 20000; ++v)
    used.insert(key_bucket(categorical_key(3, std::to_string(v)), buckets));
  CHECK(used.size() > 990);
  std::set<int64_t> sequential;
  for (int64_t key = int64_t{1} << 40; key < (int64_t{1} << 40) + 20000; ++key)
    sequential.insert(key_bucket(key, buckets));
  CHECK(sequential.size() > 990);

  // A raw key in a record that is not one id per field has no field: an error naming it.
  RawRecord few;
  few.data = encode_example(example(0.0f, {3, categorical_key(0, "x")}, {}, {}));
  few.file = std::make_shared<const std::string>("few.tfrecord");
  auto refused = parse_batch({few}, DataFormat::tfrecord, o);
  REQUIRE(!refused.ok());
  CHECK(refused.error().code == Errc::data_loss);
  CHECK(refused.error().message.find("few.tfrecord") != std::string::npos);
  CHECK(refused.error().message.find("one id per field (26), not 2") != std::string::npos);
  // Records of rows only are read as before, whatever their count.
  RawRecord rows;
  rows.data = encode_example(example(0.0f, {3, 2000}, {}, {}));
  CHECK(parse_batch({rows}, DataFormat::tfrecord, o).ok());
  // No buckets: an error, not a division by zero.
  o.buckets_per_field = 0;
  auto none = parse_batch({r}, DataFormat::tfrecord, o);
  REQUIRE(!none.ok());
  CHECK(none.error().message.find("buckets_per_field") != std::string::npos);
}

TEST_CASE("sparse_input: files sharded by worker, every record once, formats alike", "[records]") {
  TempDir dir;
  // Four files of 10 examples; example k has label k (unique) and ids {k, 100 + k}.
  std::vector<std::string> tf_files, svm_files;
  for (int f = 0; f < 4; ++f) {
    std::vector<Example> ex;
    std::string svm;
    for (int i = 0; i < 10; ++i) {
      const int k = f * 10 + i;
      ex.push_back(example(static_cast<float>(k), {k, 100 + k}, {}, {}));
      svm += std::to_string(k) + " " + std::to_string(k) + ":1 " + std::to_string(100 + k) + ":1\n";
    }
    tf_files.push_back(dir.file("part-" + std::to_string(f) + ".tfrecord"));
    svm_files.push_back(dir.file("part-" + std::to_string(f) + ".svm"));
    write_tfrecords(tf_files.back(), ex);
    write_text(svm_files.back(), svm);
  }
  SparseInputOptions o;
  o.batch = 4;
  o.drop_remainder = false;
  o.epochs = 1;
  std::multiset<float> all;
  for (int w = 0; w < 2; ++w) {
    InputContext ctx{2, w, 1};
    o.format = DataFormat::tfrecord;
    auto tf = labels_of(sparse_input(tf_files, ctx, o));
    o.format = DataFormat::libsvm;
    auto svm = labels_of(sparse_input(svm_files, ctx, o));
    CHECK(tf == svm);
    CHECK(tf.size() == 20);
    // File-level: worker w reads files w and w + 2 whole.
    CHECK(tf.count(static_cast<float>(w * 10)) == 1);
    CHECK(tf.count(static_cast<float>(w * 10 + 20 + 9)) == 1);
    all.insert(tf.begin(), tf.end());
  }
  CHECK(all.size() == 40);
  CHECK(std::set<float>(all.begin(), all.end()).size() == 40);

  // Fewer files than pipelines: every n-th record, still each record once.
  std::multiset<float> spread;
  o.format = DataFormat::tfrecord;
  for (int w = 0; w < 3; ++w)
    for (float l : labels_of(sparse_input({tf_files[0]}, InputContext{3, w, 1}, o)))
      spread.insert(l);
  CHECK(spread.size() == 10);
  CHECK(std::set<float>(spread.begin(), spread.end()).size() == 10);

  // Sparse batch layout: CSR rows, values all ones when the file has none.
  o.cache = true;
  o.epochs = 2;
  auto it = sparse_input({tf_files[1]}, InputContext{}, o).make_iterator();
  auto b = it->next();
  REQUIRE(b);
  CHECK(b->row_splits == std::vector<int64_t>{0, 2, 4, 6, 8});
  CHECK(b->ids == std::vector<int64_t>{10, 110, 11, 111, 12, 112, 13, 113});
  CHECK(b->values == std::vector<float>(8, 1.0f));
  int batches = 1;
  while (it->next())
    ++batches;
  CHECK(batches == 6);  // 3 per pass (4 + 4 + 2), two passes, the second from the cache
}

TEST_CASE("a damaged record reaches the reader of the pipeline as an error naming it",
          "[records]") {
  TempDir dir;
  std::vector<Example> ex;
  for (int i = 0; i < 50; ++i)
    ex.push_back(example(static_cast<float>(i), {i}, {}, {}));
  const std::string path = dir.file("d.tfrecord");
  write_tfrecords(path, ex);
  auto bytes = troupe::test::read_bytes(path);
  const size_t rec = bytes.size() / 50;
  bytes[30 * rec + 14] ^= 0x01;  // data of record 30
  troupe::test::write_bytes(path, bytes);
  SparseInputOptions o;
  o.format = DataFormat::tfrecord;
  o.batch = 8;
  o.prefetch = 2;  // the error crosses the prefetch thread
  auto it = sparse_input({path}, InputContext{}, o).make_iterator();
  int good = 0;
  try {
    while (it->next())
      ++good;
    FAIL("no error");
  } catch (const BadExpectedAccess& e) {
    CHECK(e.error().code == Errc::data_loss);
    CHECK(e.error().message.find(path + ": record 30") != std::string::npos);
  }
  CHECK(good == 3);  // the batches before record 30's batch came through

  // A Criteo line with a bad field, parsed in the map step: the file and line.
  write_text(dir.file("c.txt"),
             std::string("1") + std::string(39, '\t') + "\n2" + std::string(39, '\t') + "\n");
  o.format = DataFormat::criteo;
  o.drop_remainder = false;
  it = sparse_input({dir.file("c.txt")}, InputContext{}, o).make_iterator();
  try {
    (void)it->next();
    FAIL("no error");
  } catch (const BadExpectedAccess& e) {
    CHECK(e.error().message.find(dir.file("c.txt") + ":2: label '2'") != std::string::npos);
  }
  // Dense widths that differ within a batch are an error, not an assertion.
  write_tfrecords(path, {example(0, {1}, {}, {1.0f}), example(1, {2}, {}, {1.0f, 2.0f})});
  o.format = DataFormat::tfrecord;
  it = sparse_input({path}, InputContext{}, o).make_iterator();
  CHECK_THROWS_AS(it->next(), BadExpectedAccess);
}

using troupe::test::FifoFeeder;

TEST_CASE("line reader on a FIFO returns each line as it arrives, with no size and no seek",
          "[records]") {
  TempDir dir;
  const std::string path = dir.file("stream.txt");
  std::atomic<int> lines{0};
  FifoFeeder writer(path, {"first\nsecond\n", "thi", "rd\nlast"},
                    [&](size_t) { return lines.load() >= 2; });
  REQUIRE(writer.made());
  auto r = LineReader::open(path);
  REQUIRE(r.ok());
  RawRecord rec;
  std::vector<std::pair<std::string, int64_t>> got;
  while (r->next(rec).value()) {
    got.emplace_back(rec.data, rec.offset);
    ++lines;
    writer.poke();
  }
  CHECK(writer.join());  // the first two lines came back before the rest was written
  CHECK(got == std::vector<std::pair<std::string, int64_t>>{
                   {"first", 0}, {"second", 6}, {"third", 13}, {"last", 19}});
}

TEST_CASE(
    "TFRecord reader on a FIFO reads records as they arrive and names a record the stream "
    "cut short",
    "[records]") {
  TempDir dir;
  const std::string path = dir.file("stream.tfrecord");
  const std::string one = frame_record("one"), two = frame_record(std::string(3000, 'x'));
  std::atomic<int> records{0};
  FifoFeeder writer(path, {one, two + two.substr(0, 20)},
                    [&](size_t) { return records.load() >= 1; });
  REQUIRE(writer.made());
  auto r = TFRecordReader::open(path);
  REQUIRE(r.ok());
  RawRecord rec;
  REQUIRE(r->next(rec).value());
  CHECK(rec.data == "one");
  ++records;
  writer.poke();
  REQUIRE(r->next(rec).value());
  CHECK(rec.data == std::string(3000, 'x'));
  auto bad = r->next(rec);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().code == Errc::data_loss);
  CHECK(bad.error().message.find(path + ": record 2 at byte " +
                                 std::to_string(one.size() + two.size()) + ": truncated data") !=
        std::string::npos);
  CHECK(writer.join());

  // A length over the limit is refused from the header, as for a file.
  FifoFeeder big(dir.file("big.tfrecord"), {frame_record(std::string(5000, 'y'))});
  REQUIRE(big.made());
  r = TFRecordReader::open(dir.file("big.tfrecord"), 4096);
  REQUIRE(r.ok());
  bad = r->next(rec);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().message.find("length 5000 over the limit of 4096 bytes") != std::string::npos);
  CHECK(big.join());  // the record fits the pipe's buffer: written before the reader ends
}

TEST_CASE("readers take standard input as - and name it in errors but refuse a directory",
          "[records]") {
  TempDir dir;
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  const int saved = ::dup(STDIN_FILENO);
  REQUIRE(::dup2(fds[0], STDIN_FILENO) >= 0);
  ::close(fds[0]);
  const std::string text = "1\t2\n0\t3\nnot a label\n";
  REQUIRE(::write(fds[1], text.data(), text.size()) == static_cast<ssize_t>(text.size()));
  ::close(fds[1]);
  std::vector<std::string> lines;
  Status failed;
  {
    auto r = LineReader::open("-");
    REQUIRE(r.ok());
    RawRecord rec;
    for (;;) {
      auto more = r->next(rec);
      if (!more.value()) break;
      lines.push_back(rec.data);
      CHECK(rec.where() == "standard input:" + std::to_string(lines.size()) + " at offset " +
                               std::to_string(lines.size() == 1   ? 0
                                              : lines.size() == 2 ? 4
                                                                  : 8));
    }
  }
  ::dup2(saved, STDIN_FILENO);  // the reader closed its own copy, not standard input
  ::close(saved);
  CHECK(lines == std::vector<std::string>{"1\t2", "0\t3", "not a label"});

  auto d = LineReader::open(dir.path());
  REQUIRE_FALSE(d.ok());
  CHECK(d.error().message == dir.path() + ": not a file or a stream");
  CHECK_FALSE(TFRecordReader::open(dir.path()).ok());
}

TEST_CASE("sparse_input trains from one FIFO per worker, as SageMaker's Pipe mode feeds them",
          "[records]") {
  TempDir dir;
  std::vector<std::string> paths;
  std::vector<std::unique_ptr<FifoFeeder>> writers;
  for (int w = 0; w < 2; ++w) {
    paths.push_back(dir.file("train-" + std::to_string(w) + ".tfrecord"));
    std::string bytes;
    for (int i = 0; i < 40; ++i)
      bytes += frame_record(encode_example(example(static_cast<float>(100 * w + i), {i}, {}, {})));
    writers.push_back(std::make_unique<FifoFeeder>(paths.back(), std::vector<std::string>{bytes}));
    REQUIRE(writers.back()->made());
  }
  SparseInputOptions o;
  o.format = DataFormat::tfrecord;
  o.batch = 16;
  o.drop_remainder = false;
  o.epochs = 1;
  for (int w = 0; w < 2; ++w) {
    InputContext ctx;
    ctx.num_input_pipelines = 2;
    ctx.input_pipeline_id = w;
    const auto got = labels_of(sparse_input(paths, ctx, o));
    std::multiset<float> want;
    for (int i = 0; i < 40; ++i)
      want.insert(static_cast<float>(100 * w + i));
    CHECK(got == want);  // its own stream, every record once
  }
  for (auto& w : writers)
    CHECK(w->join());
}
