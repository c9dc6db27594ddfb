#include <catch2/catch.hpp>

#include <sys/resource.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "core/data/idx.hpp"
#include "core/data/text_formats.hpp"
#include "helpers.hpp"
#include "idx_files.hpp"

using namespace troupe::core;
using troupe::test::idx_filled;
using troupe::test::TempDir;
using troupe::test::write_gz;
using troupe::test::write_text;

TEST_CASE("IDX files are read gzip'ed or plain", "[readers]") {
  TempDir dir;
  auto bytes = idx_filled({3, 2, 2}, 0);
  write_gz(dir.file("a.gz"), bytes);
  troupe::test::write_bytes(dir.file("a.idx"), bytes);
  for (const char* name : {"a.gz", "a.idx"}) {
    auto a = read_idx(dir.file(name));
    REQUIRE(a.ok());
    CHECK(a->dims == std::vector<int64_t>{3, 2, 2});
    REQUIRE(a->data.size() == 12);
    CHECK(a->data[11] == 1);
  }
}

TEST_CASE("Bad IDX files are errors naming the file and the offset", "[readers]") {
  TempDir dir;
  auto good = idx_filled({4, 5}, 0);

  SECTION("missing") {
    auto r = read_idx(dir.file("nope.gz"));
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == Errc::not_found);
    CHECK_THAT(r.error().message, Catch::Contains("nope.gz"));
  }
  SECTION("truncated payload") {
    auto cut = good;
    cut.resize(cut.size() - 3);
    write_gz(dir.file("cut.gz"), cut);
    auto r = read_idx(dir.file("cut.gz"));
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == Errc::data_loss);
    CHECK_THAT(r.error().message, Catch::Contains("cut.gz") && Catch::Contains("truncated") &&
                                      Catch::Contains("offset 29"));
  }
  SECTION("truncated header") {
    troupe::test::write_bytes(dir.file("h.idx"), {0, 0, 8, 2, 0, 0});
    auto r = read_idx(dir.file("h.idx"));
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.error().message, Catch::Contains("offset 4"));
  }
  SECTION("bad magic") {
    auto bad = good;
    bad[0] = 7;
    write_gz(dir.file("magic.gz"), bad);
    auto r = read_idx(dir.file("magic.gz"));
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.error().message,
               Catch::Contains("not an IDX file") && Catch::Contains("offset 0"));
  }
  SECTION("trailing bytes") {
    auto extra = good;
    extra.push_back(1);
    write_gz(dir.file("extra.gz"), extra);
    auto r = read_idx(dir.file("extra.gz"));
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.error().message, Catch::Contains("trailing"));
  }
  SECTION("corrupt compressed stream") {
    std::vector<char> big = idx_filled({200, 50}, 0);
    write_gz(dir.file("c.gz"), big);
    auto bytes = troupe::test::read_bytes(dir.file("c.gz"));
    bytes.resize(bytes.size() / 2);  // a gzip stream cut in the middle
    troupe::test::write_bytes(dir.file("c.gz"), bytes);
    auto r = read_idx(dir.file("c.gz"));
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == Errc::data_loss);
    CHECK_THAT(r.error().message, Catch::Contains("c.gz") && Catch::Contains("offset"));
  }
}

TEST_CASE("Fashion-MNIST loads from Debian's package", "[readers]") {
  auto test = load_fashion_mnist(fashion_mnist_dir, "t10k");
  REQUIRE(test.ok());
  REQUIRE(test->size() == 10000);
  CHECK((*test)[0].features.size() == 784);
  std::vector<int> counts(10);
  for (const auto& e : *test)
    ++counts[static_cast<size_t>(e.label)];
  for (int c : counts)
    CHECK(c == 1000);  // the test split is balanced
  CHECK_FALSE(load_fashion_mnist(fashion_mnist_dir, "valid").ok());
}

namespace {

// load_fashion_mnist's "train" split from images of `image_dims` and `labels` labels.
Expected<std::vector<Example>> load_made(const TempDir& dir, std::vector<uint32_t> image_dims,
                                         uint32_t labels) {
  write_gz(dir.file("train-images-idx3-ubyte.gz"), idx_filled(std::move(image_dims), 0));
  write_gz(dir.file("train-labels-idx1-ubyte.gz"), idx_filled({labels}, 0));
  return load_fashion_mnist(dir.path(), "train");
}

}  // namespace

TEST_CASE("Image and label counts must agree", "[readers]") {
  TempDir dir;
  auto r = load_made(dir, {3, 28, 28}, 2);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.error().message, Catch::Contains("3 images") && Catch::Contains("2 labels"));
}

TEST_CASE("Images of another shape are refused when loaded, naming the file", "[readers]") {
  TempDir dir;
  auto r = load_made(dir, {3, 27, 28}, 3);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == Errc::data_loss);
  CHECK_THAT(r.error().message,
             Catch::Contains("train-images-idx3-ubyte.gz") && Catch::Contains("27x28"));
}

TEST_CASE("An IDX header announcing a huge payload allocates only what arrives", "[readers]") {
  TempDir dir;
  // 65535 x 65535 bytes (4 GiB) announced, 10 bytes present.
  std::vector<char> bytes{0,          0,          0x08, 2, 0,          0,
                          char(0xff), char(0xff), 0,    0, char(0xff), char(0xff)};
  bytes.insert(bytes.end(), 10, 1);
  write_gz(dir.file("huge.gz"), bytes);
  troupe::test::write_bytes(dir.file("huge.idx"), bytes);
  auto peak_mib = [] {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return u.ru_maxrss / 1024;  // KiB on Linux
  };
  const long before = peak_mib();
  for (const char* name : {"huge.gz", "huge.idx"}) {
    auto r = read_idx(dir.file(name));
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == Errc::data_loss);
    CHECK_THAT(r.error().message, Catch::Contains(name) && Catch::Contains("truncated"));
  }
  CHECK(peak_mib() - before < 256);
}

TEST_CASE("LibSVM rows parse into sparse examples", "[readers]") {
  TempDir dir;
  write_text(dir.file("a.svm"), "1 3:0.5 10:2\n# a comment\n\n-1 1:1 2:-3e-1 # trailing\n");
  auto r = read_libsvm(dir.file("a.svm"));
  REQUIRE(r.ok());
  REQUIRE(r->size() == 2);
  CHECK((*r)[0].label == 1.0f);
  CHECK((*r)[0].ids == std::vector<int64_t>{3, 10});
  CHECK((*r)[1].values == std::vector<float>{1.0f, -0.3f});

  write_text(dir.file("b.svm"), "1 3:0.5\n0 4:x\n");
  auto bad = read_libsvm(dir.file("b.svm"));
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().code == Errc::data_loss);
  CHECK_THAT(bad.error().message, Catch::Contains("b.svm:2") && Catch::Contains("offset 10"));

  write_text(dir.file("c.svm"), "1 5:1 3:1\n");
  CHECK_THAT(read_libsvm(dir.file("c.svm")).error().message, Catch::Contains("not ascending"));
}

TEST_CASE("CSV lines parse into dense examples", "[readers]") {
  TempDir dir;
  write_text(dir.file("a.csv"), "x,y,label\n1,2,0\n3.5, 4 ,1\n");
  auto r = read_csv(dir.file("a.csv"));
  REQUIRE(r.ok());
  REQUIRE(r->size() == 2);
  CHECK((*r)[1].features == std::vector<float>{3.5f, 4.0f});
  CHECK((*r)[1].label == 1.0f);

  CsvOptions first{',', false, 0};
  write_text(dir.file("b.csv"), "1,2,3\n");
  CHECK(read_csv(dir.file("b.csv"), first)->front().features == std::vector<float>{2.0f, 3.0f});

  write_text(dir.file("c.csv"), "a,b\n1,2\n1,oops\n");
  auto bad = read_csv(dir.file("c.csv"));
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.error().message,
             Catch::Contains("c.csv:3") && Catch::Contains("column 2") && Catch::Contains("oops"));
  write_text(dir.file("d.csv"), "1,2\n1,2,3\n");
  CHECK_THAT(read_csv(dir.file("d.csv"), CsvOptions{',', false, -1}).error().message,
             Catch::Contains("3 fields"));
}

namespace {

// A Criteo line: label, 13 integers, 26 categorical values (empty strings are missing).
std::string criteo_line(const std::string& label, std::vector<std::string> ints,
                        std::vector<std::string> cats) {
  std::string s = label;
  for (const auto& x : ints)
    s += "\t" + x;
  for (const auto& c : cats)
    s += "\t" + c;
  return s + "\n";
}

}  // namespace

TEST_CASE("Criteo lines read into dense and hashed sparse features", "[readers]") {
  TempDir dir;
  std::vector<std::string> ints(13, "3"), cats(26, "68fd1e64");
  ints[1] = "-1";  // negative counts occur in I2: log1p(max(x, 0))
  std::vector<std::string> sparse_ints(13, ""), sparse_cats(26, "");
  sparse_ints[0] = "7";
  sparse_cats[3] = "68fd1e64";
  write_text(dir.file("day.txt"),
             criteo_line("1", ints, cats) + criteo_line("0", sparse_ints, sparse_cats));
  CriteoOptions o;
  o.buckets_per_field = 1000;
  auto r = read_criteo(dir.file("day.txt"), o);
  REQUIRE(r.ok());
  REQUIRE(r->size() == 2);
  const Example& a = (*r)[0];
  CHECK(a.label == 1.0f);
  REQUIRE(a.features.size() == 13);
  CHECK(a.features[0] == Approx(std::log1p(3.0f)));
  CHECK(a.features[1] == 0.0f);
  REQUIRE(a.ids.size() == 26);
  const int64_t bucket = hash_bucket("68fd1e64", 1000);
  for (int64_t f = 0; f < 26; ++f)
    CHECK(a.ids[static_cast<size_t>(f)] == f * 1000 + bucket);  // one table offset per field
  const Example& b = (*r)[1];
  CHECK(b.label == 0.0f);
  CHECK(b.features[0] == Approx(std::log1p(7.0f)));
  CHECK(b.features[5] == 0.0f);  // missing
  CHECK(b.ids[3] == a.ids[3]);
  CHECK(b.ids[4] == 4 * 1000 + hash_bucket("", 1000));  // missing hashes as ""
  // The same batch type as LibSVM's: ids in CSR rows.
  const Batch batch = collate(*r);
  CHECK(batch.row_splits == std::vector<int64_t>{0, 26, 52});
  CHECK(batch.features.shape() == (Shape{2, 13}));
}

TEST_CASE("Bad Criteo lines are errors naming file, line and offset", "[readers]") {
  TempDir dir;
  const std::vector<std::string> ints(13, "1"), cats(26, "a");
  const std::string good = criteo_line("0", ints, cats);
  auto error_of = [&](const std::string& text) {
    write_text(dir.file("bad.txt"), text);
    auto r = read_criteo(dir.file("bad.txt"));
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == Errc::data_loss);
    return r.error().message;
  };
  auto short_cats = cats;
  short_cats.pop_back();
  CHECK_THAT(error_of(good + criteo_line("1", ints, short_cats)),
             Catch::Contains("bad.txt:2") && Catch::Contains("39 tab-separated fields") &&
                 Catch::Contains("offset " + std::to_string(good.size())));
  CHECK_THAT(error_of(criteo_line("2", ints, cats)), Catch::Contains("label '2'"));
  auto bad_int = ints;
  bad_int[4] = "x1";
  CHECK_THAT(error_of(criteo_line("1", bad_int, cats)),
             Catch::Contains("I5 is not an integer") && Catch::Contains("offset 10"));
  CHECK_THAT(error_of(criteo_line("1", ints, cats).substr(0, good.size() - 1) + "\textra\n"),
             Catch::Contains("more than 40"));
  CHECK(read_criteo(dir.file("nope.txt")).error().code == Errc::not_found);
}
