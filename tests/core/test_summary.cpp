#include <cstring>
#include <filesystem>
#include <fstream>

#include <catch2/catch.hpp>

#include "core/checkpoint/crc32c.hpp"
#include "core/summary/event_writer.hpp"
#include "helpers.hpp"
#include "run_program.hpp"

namespace tc = troupe::core;
namespace fs = std::filesystem;

namespace {

// protoc --decode_raw of one record's payload (Debian's protobuf-compiler, installed by
// scripts/install-deps.sh): an independent reading of the protocol buffer.
std::string decode_raw(const std::string& bytes, const std::string& dir) {
  const std::string path = dir + "/record.bin";
  std::ofstream(path, std::ios::binary) << bytes;
  auto r = troupe::test::run_program("protoc --decode_raw < " + path + " 2>&1");
  REQUIRE(r.exit_code == 0);
  return r.output;
}

std::string hex32(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", u);
  return buf;
}

std::string only_event_file(const std::string& dir) {
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().rfind("events.out.tfevents.", 0) == 0)
      files.push_back(e.path().string());
  REQUIRE(files.size() == 1);
  return files[0];
}

}  // namespace

TEST_CASE("masked CRC32C matches TensorFlow's record checksum", "[summary]") {
  // CRC-32C of "123456789" is 0xe3069283; TensorFlow masks it as ((c >> 15) | (c << 17)) +
  // 0xa282ead8 (mod 2^32).
  const uint32_t c = tc::crc32c("123456789", 9);
  REQUIRE(c == 0xe3069283u);
  REQUIRE(tc::mask_crc32c(c) == 0xc78ab0e5u);
}

TEST_CASE("event files hold framed, CRC-checked Event records that protoc decodes", "[summary]") {
  troupe::test::TempDir dir;
  const std::string logdir = dir.path() + "/logs/train";
  {
    tc::EventFileWriter w(logdir);
    REQUIRE(w.path().empty());  // nothing is created before the first write
    REQUIRE(w.add_scalar("epoch_loss", 0.5f, 1).ok());
    REQUIRE(w.add_scalar("epoch_accuracy", 0.8125f, 2).ok());
    REQUIRE(w.path() == only_event_file(logdir));
  }
  const std::string file = only_event_file(logdir);
  auto records = tc::read_records(file);
  REQUIRE(records.ok());
  REQUIRE(records->size() == 3);

  // The first event names the file version; wall time is field 1 (a fixed64).
  const std::string first = decode_raw((*records)[0], dir.path());
  CHECK(first.find("3: \"brain.Event:2\"") != std::string::npos);
  CHECK(first.find("1: 0x") != std::string::npos);

  // Scalars: step is field 2; summary (5) holds value (1) with tag (1) and simple_value (2).
  const std::string loss = decode_raw((*records)[1], dir.path());
  INFO(loss);
  CHECK(loss.find("2: 1\n") != std::string::npos);
  CHECK(loss.find("5 {") != std::string::npos);
  CHECK(loss.find("1: \"epoch_loss\"") != std::string::npos);
  CHECK(loss.find("2: " + hex32(0.5f)) != std::string::npos);
  const std::string acc = decode_raw((*records)[2], dir.path());
  CHECK(acc.find("2: 2\n") != std::string::npos);
  CHECK(acc.find("1: \"epoch_accuracy\"") != std::string::npos);
  CHECK(acc.find("2: " + hex32(0.8125f)) != std::string::npos);

  // The framing checks out by hand: length, masked CRC of the length, data, masked CRC.
  const auto bytes = troupe::test::read_bytes(file);
  uint64_t len;
  uint32_t len_crc, data_crc;
  std::memcpy(&len, bytes.data(), 8);
  std::memcpy(&len_crc, bytes.data() + 8, 4);
  std::memcpy(&data_crc, bytes.data() + 12 + len, 4);
  CHECK(len == (*records)[0].size());
  CHECK(len_crc == tc::mask_crc32c(tc::crc32c(bytes.data(), 8)));
  CHECK(data_crc == tc::mask_crc32c(tc::crc32c(bytes.data() + 12, len)));
}

TEST_CASE("a damaged or truncated event file is an error naming the file and offset", "[summary]") {
  troupe::test::TempDir dir;
  {
    tc::EventFileWriter w(dir.path());
    REQUIRE(w.add_scalar("loss", 1.0f, 1).ok());
  }
  const std::string file = only_event_file(dir.path());
  auto bytes = troupe::test::read_bytes(file);
  const size_t first_len = bytes.size();
  auto flipped = bytes;
  flipped[flipped.size() - 6] ^= 0x40;  // inside the last record's data
  troupe::test::write_bytes(file, flipped);
  auto r = tc::read_records(file);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == tc::Errc::data_loss);
  CHECK(r.error().message.find(file) != std::string::npos);
  CHECK(r.error().message.find("record 1") != std::string::npos);
  CHECK(r.error().message.find("CRC") != std::string::npos);

  bytes.resize(first_len - 3);
  troupe::test::write_bytes(file, bytes);
  r = tc::read_records(file);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message.find("truncated") != std::string::npos);
}
