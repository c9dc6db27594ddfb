// TensorFlow's record files read: damage named by file, record and offset; records
// passed over by a reader of every n-th (TFRecordReader::skip, sharded_tfrecords).
#include <catch2/catch.hpp>

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include "core/checkpoint/crc32c.hpp"
#include "core/data/record_io.hpp"
#include "core/data/sparse_input.hpp"
#include "core/proto_wire.hpp"
#include "helpers.hpp"

using namespace troupe::core;
using troupe::test::TempDir;
using troupe::test::write_text;

namespace {}  // namespace

TEST_CASE("TFRecord reader streams records and names file, record and offset of damage",
          "[records]") {
  TempDir dir;
  const std::string path = dir.file("a.tfrecord");
  write_text(path, frame_record("first") + frame_record("") + frame_record("third"));
  auto r = TFRecordReader::open(path);
  REQUIRE(r.ok());
  RawRecord rec;
  std::vector<std::string> got;
  std::vector<int64_t> offsets;
  while (r->next(rec).value()) {
    got.push_back(rec.data);
    offsets.push_back(rec.offset);
  }
  CHECK(got == std::vector<std::string>{"first", "", "third"});
  CHECK(offsets == std::vector<int64_t>{0, 21, 37});

  // A flipped data byte in the third record.
  auto bytes = troupe::test::read_bytes(path);
  bytes[37 + 12 + 1] ^= 0x20;
  troupe::test::write_bytes(path, bytes);
  r = TFRecordReader::open(path);
  REQUIRE(r.ok());
  REQUIRE(r->next(rec).value());
  REQUIRE(r->next(rec).value());
  auto bad = r->next(rec);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().code == Errc::data_loss);
  CHECK(bad.error().message.find(path + ": record 2 at byte 37") != std::string::npos);
  CHECK(bad.error().message.find("data CRC") != std::string::npos);

  CHECK(TFRecordReader::open(dir.file("missing")).error().code == Errc::not_found);
}

TEST_CASE("a TFRecord length past the limit or the file is refused before allocating",
          "[records]") {
  TempDir dir;
  auto header = [](uint64_t len) {
    std::string h;
    proto::put_le<uint64_t>(h, len);
    proto::put_le<uint32_t>(h, mask_crc32c(crc32c(h.data(), 8)));
    return h;
  };
  RawRecord rec;
  // Over the reader's limit (a right length CRC, so only the limit check stops it).
  write_text(dir.file("big"), header(uint64_t{1} << 40) + std::string(8, 'x'));
  auto r = TFRecordReader::open(dir.file("big"), 1 << 20);
  REQUIRE(r.ok());
  auto got = r->next(rec);
  REQUIRE_FALSE(got.ok());
  CHECK(got.error().message.find("over the limit") != std::string::npos);
  // Under no limit: a length near 2^64 must not wrap past the end of the file.
  write_text(dir.file("wrap"), header(~uint64_t{0} - 2) + std::string(8, 'x'));
  r = TFRecordReader::open(dir.file("wrap"), ~uint64_t{0});
  REQUIRE(r.ok());
  got = r->next(rec);
  REQUIRE_FALSE(got.ok());
  CHECK(got.error().message.find("truncated data") != std::string::npos);
  CHECK(rec.data.capacity() < 1024);  // nothing was allocated for it
  // A header cut short.
  write_text(dir.file("short"), frame_record("ok") + header(5).substr(0, 7));
  r = TFRecordReader::open(dir.file("short"));
  REQUIRE(r->next(rec).value());
  got = r->next(rec);
  REQUIRE_FALSE(got.ok());
  CHECK(got.error().message.find("record 1 at byte 18: truncated header") != std::string::npos);
}

TEST_CASE("skip passes over a record without its data and finds damage in its header",
          "[records]") {
  TempDir dir;
  const std::string path = dir.file("a.tfrecord");
  write_text(path,
             frame_record("first") + frame_record(std::string(10000, 'y')) + frame_record("third"));
  // A flipped data byte in the second record: skip does not read its data, next does.
  auto bytes = troupe::test::read_bytes(path);
  bytes[21 + 12 + 5] ^= 0x20;
  troupe::test::write_bytes(path, bytes);
  auto r = TFRecordReader::open(path);
  REQUIRE(r.ok());
  RawRecord rec;
  REQUIRE(r->next(rec).value());
  REQUIRE(r->skip().value());
  REQUIRE(r->next(rec).value());
  CHECK(rec.data == "third");
  CHECK(rec.index == 2);
  CHECK(rec.offset == 21 + 12 + 10000 + 4);
  CHECK_FALSE(r->skip().value());  // the end
  r = TFRecordReader::open(path);
  REQUIRE(r->skip().value());
  auto bad = r->next(rec);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().message.find("record 1 at byte 21") != std::string::npos);
  CHECK(bad.error().message.find("data CRC") != std::string::npos);

  // A record cut short, and a damaged length, are errors of skip too.
  write_text(path, frame_record("ok") + frame_record("cut short").substr(0, 15));
  r = TFRecordReader::open(path);
  REQUIRE(r->skip().value());
  bad = r->skip();
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().message.find("record 1 at byte 18: truncated data") != std::string::npos);
  bytes = troupe::test::read_bytes(path);
  bytes[1] ^= 0x01;
  troupe::test::write_bytes(path, bytes);
  bad = TFRecordReader::open(path)->skip();
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().message.find("length CRC mismatch") != std::string::npos);
}

TEST_CASE("sharded_tfrecords reads each shard's records as reading all and keeping every n-th",
          "[records]") {
  TempDir dir;
  std::vector<std::string> files;
  int next = 0;
  for (int f = 0; f < 3; ++f) {  // 7, 0 and 12 records: shards cross the files' ends
    files.push_back(dir.file("f" + std::to_string(f) + ".tfrecord"));
    std::string bytes;
    for (int i = 0; i < (f == 0 ? 7 : f == 1 ? 0 : 12); ++i)
      bytes += frame_record("r" + std::to_string(next++) + std::string(i * 50, 'z'));
    write_text(files.back(), bytes);
  }
  auto payloads = [](const Dataset<RawRecord>& ds) {
    std::vector<std::string> out;
    auto it = ds.make_iterator();
    while (auto r = it->next())
      out.push_back(r->data + "@" + *r->file + ":" + std::to_string(r->offset));
    return out;
  };
  for (int64_t shards : {1, 2, 5, 32}) {
    for (int64_t shard = 0; shard < std::min<int64_t>(shards, 5); ++shard) {
      INFO(shards << " shards, shard " << shard);
      auto all = from_vector(files).flat_map(
          [](std::string p) { return file_records(p, DataFormat::tfrecord); });
      const auto want = payloads(all.shard(shards, shard));
      const auto ds = sharded_tfrecords(files, shards, shard);
      CHECK(payloads(ds) == want);
      CHECK(payloads(ds.repeat(2)).size() == 2 * want.size());  // each pass from the start
    }
  }
}
