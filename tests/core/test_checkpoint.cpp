#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>

#include "core/checkpoint/checkpoint_manager.hpp"
#include "core/checkpoint/crc32c.hpp"
#include "helpers.hpp"

using namespace troupe::core;
using troupe::test::TempDir;

namespace {

Checkpoint sample(float base) {
  Checkpoint c;
  c.tensors["dense/kernel"] = troupe::test::random_tensor(Shape{3, 4}, static_cast<uint64_t>(base));
  c.tensors["dense/kernel"][0] = base;
  c.tensors["scalar"] = Tensor(Shape{}, base);
  c.ints["step"] = {static_cast<int64_t>(base)};
  c.ints["empty"] = {};
  return c;
}

}  // namespace

TEST_CASE("CRC32C matches the standard check values", "[checkpoint]") {
  CHECK(crc32c("123456789", 9) == 0xE3069283u);
  CHECK(crc32c("", 0) == 0u);
  std::vector<char> zeros(32, 0);
  CHECK(crc32c(zeros.data(), zeros.size()) == 0x8A9136AAu);  // RFC 3720 test vector
  // Incremental extension equals one pass, at unaligned split points.
  const std::string s = "The quick brown fox jumps over the lazy dog, twice over.";
  for (size_t split = 0; split <= s.size(); split += 7)
    CHECK(crc32c_extend(crc32c(s.data(), split), s.data() + split, s.size() - split) ==
          crc32c(s.data(), s.size()));
}

TEST_CASE("Checkpoints round-trip", "[checkpoint]") {
  TempDir dir;
  const auto path = dir.file("c.tckpt");
  const Checkpoint c = sample(5.0f);
  REQUIRE(write_checkpoint(path, c).ok());
  auto r = read_checkpoint(path);
  REQUIRE(r.ok());
  CHECK(r->tensors.size() == 2);
  CHECK(r->tensors.at("dense/kernel").shape() == (Shape{3, 4}));
  CHECK(max_abs_diff(r->tensors.at("dense/kernel"), c.tensors.at("dense/kernel")) == 0.0f);
  CHECK(r->tensors.at("scalar").shape().rank() == 0);
  CHECK(r->ints.at("step") == std::vector<int64_t>{5});
  CHECK(r->ints.at("empty").empty());
  // No temporary file is left behind.
  CHECK(std::distance(std::filesystem::directory_iterator(dir.path()), {}) == 1);
}

TEST_CASE("Every corrupted byte and every truncation is detected", "[checkpoint]") {
  TempDir dir;
  const auto path = dir.file("c.tckpt");
  REQUIRE(write_checkpoint(path, sample(1.0f)).ok());
  const auto good = troupe::test::read_bytes(path);
  for (size_t i = 0; i < good.size(); ++i) {
    auto bad = good;
    bad[i] = static_cast<char>(bad[i] ^ 0x5a);
    troupe::test::write_bytes(path, bad);
    auto r = read_checkpoint(path);
    INFO("flipped byte " << i);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == Errc::data_loss);
    CHECK_THAT(r.error().message, Catch::Contains(path));
  }
  for (size_t n = 0; n < good.size(); ++n) {
    troupe::test::write_bytes(path,
                              std::vector<char>(good.begin(), good.begin() + static_cast<long>(n)));
    auto r = read_checkpoint(path);
    INFO("truncated to " << n);
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.error().message, Catch::Contains("offset"));
  }
  auto longer = good;
  longer.push_back(0);
  troupe::test::write_bytes(path, longer);
  CHECK_THAT(read_checkpoint(path).error().message, Catch::Contains("trailing"));
  CHECK(read_checkpoint(dir.file("missing")).error().code == Errc::not_found);
}

TEST_CASE("A failed write leaves the existing checkpoint intact", "[checkpoint]") {
  TempDir dir;
  const auto path = dir.file("c.tckpt");
  REQUIRE(write_checkpoint(path, sample(2.0f)).ok());
  // A directory cannot be renamed over... so write to a path whose rename must fail.
  std::filesystem::create_directory(dir.file("taken"));
  std::filesystem::create_directory(dir.file("taken/inside"));
  auto st = write_checkpoint(dir.file("taken"), sample(3.0f));
  REQUIRE_FALSE(st.ok());
  CHECK(st.error().code == Errc::io_error);
  CHECK(read_checkpoint(path)->ints.at("step") == std::vector<int64_t>{2});
  // Only the good file and the directory remain: the temporary file was removed.
  CHECK(std::distance(std::filesystem::directory_iterator(dir.path()), {}) == 2);
}

TEST_CASE("CheckpointManager keeps the newest and skips damaged ones", "[checkpoint]") {
  TempDir dir;
  CheckpointManager m(dir.file("ckpt"), 3);
  CHECK_FALSE(m.latest().has_value());
  CHECK(m.restore_latest().error().code == Errc::not_found);
  for (int step : {10, 20, 30, 40, 50})
    REQUIRE(m.save(sample(static_cast<float>(step)), step).ok());
  auto all = m.checkpoints();
  REQUIRE(all.size() == 3);
  CHECK(all.front().first == 30);
  CHECK(*m.latest() == dir.file("ckpt") + "/ckpt-50.tckpt");

  // A stray temporary file of an interrupted write is not a checkpoint.
  troupe::test::write_bytes(dir.file("ckpt/ckpt-60.tckpt.tmp-1-0"), {'x'});
  CHECK(m.checkpoints().size() == 3);

  // Damage the newest: restore falls back to the one before and reports what it skipped.
  auto bytes = troupe::test::read_bytes(*m.latest());
  bytes[bytes.size() / 2] ^= 1;
  troupe::test::write_bytes(*m.latest(), bytes);
  std::vector<Error> skipped;
  auto r = m.restore_latest(&skipped);
  REQUIRE(r.ok());
  CHECK(r->first == 40);
  CHECK(r->second.ints.at("step") == std::vector<int64_t>{40});
  REQUIRE(skipped.size() == 1);
  CHECK_THAT(skipped[0].message, Catch::Contains("ckpt-50"));
  CHECK(m.checkpoints().size() == 3);  // the damaged file is left for inspection

  // Every one damaged: saved state was lost, which is data_loss naming the newest (not the
  // not_found of an empty directory, on which a caller starts afresh).
  for (const auto& [step, path] : m.checkpoints()) {
    auto b = troupe::test::read_bytes(path);
    b[b.size() / 2] ^= 0x40;  // not the bit flipped above, which would mend ckpt-50
    troupe::test::write_bytes(path, b);
  }
  skipped.clear();
  auto none = m.restore_latest(&skipped);
  REQUIRE_FALSE(none.ok());
  CHECK(none.error().code == Errc::data_loss);
  CHECK_THAT(none.error().message,
             Catch::Contains("none of 3 checkpoints can be read") && Catch::Contains("ckpt-50"));
  CHECK(skipped.size() == 3);
  CHECK(m.checkpoints().size() == 3);
}

TEST_CASE("The temporaries of writers killed mid-write are removed, a live writer's kept",
          "[checkpoint]") {
  TempDir dir;
  CheckpointManager m(dir.file("ckpt"), 3);
  REQUIRE(m.save(sample(1.0f), 1).ok());
  // A child that has exited (and been reaped): its pid runs nothing now.
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  REQUIRE(child > 0);
  REQUIRE(::waitpid(child, nullptr, 0) == child);
  const std::string dead = std::to_string(child), live = std::to_string(::getpid());
  const std::vector<std::string> abandoned{"ckpt/ckpt-2.tckpt.tmp-" + dead + "-0",
                                           "ckpt/incarnation.tckpt.tmp-" + dead + "-7"};
  const std::vector<std::string> kept{"ckpt/ckpt-3.tckpt.tmp-" + live + "-1",  // in progress
                                      "ckpt/notes.tmp-" + dead + "-x", "ckpt/other.txt"};
  for (const auto& f : abandoned)
    troupe::test::write_bytes(dir.file(f), {'x'});
  for (const auto& f : kept)
    troupe::test::write_bytes(dir.file(f), {'x'});
  CHECK(remove_abandoned_writes(dir.file("ckpt")) == 2);
  for (const auto& f : abandoned)
    CHECK_FALSE(std::filesystem::exists(dir.file(f)));
  for (const auto& f : kept)
    CHECK(std::filesystem::exists(dir.file(f)));
  // save() clears them too.
  troupe::test::write_bytes(dir.file(abandoned[0]), {'x'});
  REQUIRE(m.save(sample(4.0f), 4).ok());
  CHECK_FALSE(std::filesystem::exists(dir.file(abandoned[0])));
  CHECK(m.checkpoints().size() == 2);
}

TEST_CASE("A directory reused by a new run keeps the new run's checkpoints", "[checkpoint]") {
  TempDir dir;
  CheckpointManager earlier(dir.file("ckpt"), 2);
  for (int step : {4000, 5000})
    REQUIRE(earlier.save(sample(static_cast<float>(step)), step).ok());
  // That run ended an hour ago.
  for (const auto& [step, path] : earlier.checkpoints())
    std::filesystem::last_write_time(
        path, std::filesystem::file_time_type::clock::now() - std::chrono::hours(1));
  CheckpointManager again(dir.file("ckpt"), 2);
  REQUIRE(again.save(sample(100.0f), 100).ok());
  // The step just written is the newest and survives its own save.
  CHECK(*again.latest() == dir.file("ckpt") + "/ckpt-100.tckpt");
  auto r = again.restore_latest();
  REQUIRE(r.ok());
  CHECK(r->first == 100);
  REQUIRE(again.save(sample(200.0f), 200).ok());
  auto all = again.checkpoints();
  REQUIRE(all.size() == 2);
  CHECK(all[0].first == 100);
  CHECK(all[1].first == 200);
}
