// Named input from the text and IDX formats: Criteo TSV by its column names, CSV by its
// header, IDX files as image and label (Fashion-MNIST's installed files among them).
#include <catch2/catch.hpp>

#include <fstream>
#include <map>
#include <set>

#include "core/data/idx.hpp"
#include "core/data/named_input.hpp"
#include "helpers.hpp"
#include "idx_files.hpp"
#include "named_input_helpers.hpp"

using namespace troupe::core;
using troupe::test::all;
using troupe::test::idx_bytes;
using troupe::test::options;
using troupe::test::read_error;
using troupe::test::TempDir;
using troupe::test::write_gz;
using troupe::test::write_text;

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
