// Keras 3 .keras files (core/keras): read what real Keras saved (tests/keras/make_fixtures.py,
// run by the keras_fixtures CTest fixture into TROUPE_KERAS_FIXTURES), write files back and
// have real Keras load them (tests/keras/check_roundtrip.py), and refuse damaged ones.
#include <catch2/catch.hpp>

#include <sys/resource.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include "core/keras/keras_file.hpp"
#include "core/subprocess.hpp"
#include "helpers.hpp"

using namespace troupe;
using namespace troupe::core::keras;
using nlohmann::json;

namespace {

const std::string fixtures = TROUPE_KERAS_FIXTURES;

std::string fixture(const std::string& name) {
  return fixtures + "/" + name;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The plain files in `dir`: what a write leaves (the model, and no temporary file).
int regular_files(const std::string& dir) {
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    files += e.is_regular_file();
  return files;
}

json expected(const std::string& name) {
  return json::parse(slurp(fixture(name + ".expected.json")));
}

std::vector<int64_t> shape_of(const core::Tensor& t) {
  return t.shape().to_vector();
}

// Runs tests/keras/check_roundtrip.py in the Keras environment; its exit code, with its
// output in `log`.
int check_roundtrip(const std::vector<std::string>& args, std::string& log) {
  test::TempDir dir;
  core::SpawnOptions o;
  o.argv = {TROUPE_KERAS_PYTHON,
            std::string(TROUPE_SOURCE_DIR) + "/tests/keras/check_roundtrip.py"};
  o.argv.insert(o.argv.end(), args.begin(), args.end());
  o.out = o.err = core::SpawnOptions::Output::file;
  o.out_file = o.err_file = dir.file("log");
  auto p = core::Subprocess::spawn(o);
  REQUIRE(p.ok());
  auto status = p->wait_exit(std::chrono::seconds(240));
  log = slurp(dir.file("log"));
  REQUIRE(status.has_value());
  return WIFEXITED(*status) ? WEXITSTATUS(*status) : 128 + WTERMSIG(*status);
}

// The zip's entries with one replaced (or removed, when `bytes` is null).
std::string repacked(const std::string& keras_bytes, const std::string& entry, const char* bytes) {
  auto entries = read_zip(keras_bytes, "fixture").value();
  std::vector<ZipEntry> out;
  for (auto& e : entries) {
    if (e.name != entry)
      out.push_back(e);
    else if (bytes != nullptr)
      out.push_back({e.name, bytes});
  }
  return write_zip(out, "fixture").value();
}

}  // namespace

TEST_CASE("A Sequential MLP saved by Keras reads with its config, weights and layout") {
  auto f = read_keras(fixture("mlp.keras"));
  REQUIRE(f.ok());
  CHECK(f->config["class_name"] == "Sequential");
  CHECK(f->config["config"]["name"] == "mlp");
  CHECK(f->metadata["keras_version"].get<std::string>().rfind("3.", 0) == 0);
  CHECK(f->assets.empty());
  REQUIRE(f->weights_h5);
  CHECK_FALSE(f->weights_h5->empty());
  REQUIRE(f->weights.size() == 4);
  CHECK(shape_of(f->weights.at("layers/dense/vars/0")) == std::vector<int64_t>{4, 8});
  CHECK(shape_of(f->weights.at("layers/dense/vars/1")) == std::vector<int64_t>{8});
  CHECK(shape_of(f->weights.at("layers/dense_1/vars/0")) == std::vector<int64_t>{8, 3});
  CHECK(shape_of(f->weights.at("layers/dense_1/vars/1")) == std::vector<int64_t>{3});
  for (const auto& [path, t] : f->weights)
    CHECK(t.dtype() == core::DType::float32);
  // Every saved object has a vars group named after it, the Dropout without variables too.
  CHECK(f->weight_groups.at("vars") == "mlp");
  CHECK(f->weight_groups.at("layers/dense/vars") == "dense");
  CHECK(f->weight_groups.at("layers/dropout/vars") == "dropout");
  CHECK(f->weight_groups.at("layers") == "");

  // The values, not only the shapes: Keras's predict() from them by hand.
  const json e = expected("mlp");
  const auto& x = e["inputs"][0]["values"];
  const auto& want = e["outputs"][0]["values"];
  const core::Tensor &k1 = f->weights.at("layers/dense/vars/0"),
                     &b1 = f->weights.at("layers/dense/vars/1");
  const core::Tensor &k2 = f->weights.at("layers/dense_1/vars/0"),
                     &b2 = f->weights.at("layers/dense_1/vars/1");
  for (int r = 0; r < 5; ++r) {
    float h[8], z[3], sum = 0;
    for (int j = 0; j < 8; ++j) {
      h[j] = b1[j];
      for (int i = 0; i < 4; ++i)
        h[j] += x[r * 4 + i].get<float>() * k1[i * 8 + j];
      h[j] = std::max(h[j], 0.0f);
    }
    for (int j = 0; j < 3; ++j) {
      z[j] = b2[j];
      for (int i = 0; i < 8; ++i)
        z[j] += h[i] * k2[i * 3 + j];
      sum += z[j] = std::exp(z[j]);
    }
    for (int j = 0; j < 3; ++j)
      CHECK(z[j] / sum == Approx(want[r * 3 + j].get<double>()).margin(1e-6));
  }
}

TEST_CASE(
    "A Functional model with a shared layer reads, and compiled but never fit its optimizer has "
    "no slots") {
  auto f = read_keras(fixture("two_tower.keras"));
  REQUIRE(f.ok());
  CHECK(f->config["class_name"] == "Functional");
  CHECK(f->config.contains("compile_config"));
  CHECK(f->config["config"]["layers"].size() == 8);
  // One group per layer in model.layers order, named by class; the layer's name is the attribute.
  CHECK(f->weight_groups.at("layers/dense_2/vars") == "shared");
  CHECK(f->weight_groups.at("layers/concatenate/vars") == "joined");
  CHECK(f->weight_groups.at("layers/input_layer/vars") == "a");
  CHECK(f->weight_groups.at("optimizer/vars") == "adam");
  CHECK(shape_of(f->weights.at("layers/dense_2/vars/0")) == std::vector<int64_t>{6, 4});
  // Five Dense layers (the shared one once), and the optimizer's step count and learning
  // rate, which exist before it is built; its slots do not.
  CHECK(f->weights.size() == 12);
  CHECK(f->weights.at("optimizer/vars/0").data_as<int64_t>()[0] == 0);
  CHECK(f->weights.count("optimizer/vars/2") == 0);
}

TEST_CASE(
    "After fit, Adam's variables read: iterations, learning rate, then momentum and velocity per "
    "variable") {
  auto f = read_keras(fixture("two_tower_fitted.keras"));
  REQUIRE(f.ok());
  const auto& w = f->weights;
  const core::Tensor& iterations = w.at("optimizer/vars/0");
  CHECK(iterations.dtype() == core::DType::int64);  // stored int32
  CHECK(iterations.shape().rank() == 0);
  CHECK(iterations.data_as<int64_t>()[0] == 3);
  CHECK(w.at("optimizer/vars/1").shape().rank() == 0);
  CHECK(w.at("optimizer/vars/1")[0] == Approx(0.01));
  // The model's trainable variables in model.layers order, each followed by its velocity.
  const std::vector<std::string> order = {"dense", "dense_1", "dense_2", "dense_3", "dense_4"};
  int slot = 2;
  for (const auto& layer : order)
    for (const char* var : {"0", "1"})
      for (int twice = 0; twice < 2; ++twice, ++slot) {
        INFO(layer << "/" << var << " -> optimizer/vars/" << slot);
        CHECK(shape_of(w.at("optimizer/vars/" + std::to_string(slot))) ==
              shape_of(w.at("layers/" + layer + "/vars/" + var)));
      }
  CHECK(slot == 22);
  CHECK(w.count("optimizer/vars/22") == 0);
}

TEST_CASE("BatchNormalization's four variables and float16 variables read as float32") {
  auto f = read_keras(fixture("batchnorm_half.keras"));
  REQUIRE(f.ok());
  CHECK(f->weight_groups.at("layers/batch_normalization/vars") == "norm");
  for (int i = 0; i < 4; ++i)
    CHECK(shape_of(f->weights.at("layers/batch_normalization/vars/" + std::to_string(i))) ==
          std::vector<int64_t>{3});
  // gamma near 1, beta near 0, moving mean near 0, moving variance near 1
  CHECK(f->weights.at("layers/batch_normalization/vars/0")[0] == Approx(1).margin(0.3));
  CHECK(f->weights.at("layers/batch_normalization/vars/3")[0] == Approx(1).margin(0.3));
  const core::Tensor& half = f->weights.at("layers/dense/vars/0");
  CHECK(half.dtype() == core::DType::float32);
  CHECK(shape_of(half) == std::vector<int64_t>{4, 3});
  CHECK(half[0] != 0.0f);
}

TEST_CASE("model.to_json() reads in Keras 3's form and in Keras 2's") {
  auto k3 = read_model_json(fixture("two_tower.json"));
  REQUIRE(k3.ok());
  CHECK((*k3)["class_name"] == "Functional");
  CHECK((*k3)["config"]["layers"].size() == 8);
  auto k2 = read_model_json(fixture("keras2_functional.json"));
  REQUIRE(k2.ok());
  CHECK((*k2)["keras_version"] == "2.15.0");
  CHECK((*k2)["config"]["layers"][4]["inbound_nodes"][0][1][0] == "proj_b");

  test::TempDir dir;
  std::ofstream(dir.file("bad.json")) << "{\"class_name\": ";
  std::ofstream(dir.file("weights.json")) << "{\"layers\": []}";
  auto bad = read_model_json(dir.file("bad.json"));
  CHECK(bad.error().code == core::Errc::data_loss);
  CHECK_THAT(bad.error().message, Catch::StartsWith(dir.file("bad.json") + ": not JSON"));
  auto other = read_model_json(dir.file("weights.json"));
  CHECK(other.error().code == core::Errc::invalid_argument);
  CHECK_THAT(other.error().message, Catch::Contains("no class_name"));
  CHECK(read_model_json(dir.file("none.json")).error().code == core::Errc::not_found);
}

TEST_CASE("A file written back loads in Keras and predicts as the original did") {
  test::TempDir dir;
  for (const std::string name : {"mlp", "two_tower_fitted", "batchnorm_half"}) {
    INFO(name);
    auto f = read_keras(fixture(name + ".keras"));
    REQUIRE(f.ok());
    const std::string out = dir.file(name + ".keras");
    REQUIRE(write_keras(out, *f).ok());
    auto again = read_keras(out);
    REQUIRE(again.ok());
    CHECK(again->config == f->config);
    CHECK(again->weight_groups == f->weight_groups);
    REQUIRE(again->weights.size() == f->weights.size());
    for (const auto& [path, t] : f->weights) {
      const core::Tensor& u = again->weights.at(path);
      REQUIRE(shape_of(u) == shape_of(t));
      CHECK(std::equal(u.data_as<char>(), u.data_as<char>() + u.bytes(), t.data_as<char>()));
    }
    std::string log;
    CHECK(check_roundtrip({"predict", out, fixture(name + ".expected.json")}, log) == 0);
    INFO(log);
    CHECK_THAT(log, Catch::Contains("\"ok\": true"));
  }
}

TEST_CASE("Weights changed in C++ come back in Keras as written") {
  test::TempDir dir;
  auto f = read_keras(fixture("two_tower_fitted.keras")).value();
  // The shared layer's bias, and Adam's step count.
  const std::string shared_bias = "layers/dense_2/vars/1";
  core::Tensor& bias = f.weights.at(shared_bias);
  for (int64_t i = 0; i < bias.size(); ++i)
    bias[i] = 0.25f * static_cast<float>(i) - 1.0f;
  f.weights.at("optimizer/vars/0").data_as<int64_t>()[0] = 7;
  REQUIRE(write_keras(dir.file("changed.keras"), f).ok());
  std::string log;
  REQUIRE(check_roundtrip({"weights", dir.file("changed.keras"), dir.file("w.json")}, log) == 0);
  const json w = json::parse(slurp(dir.file("w.json")));
  const std::string layer = f.weight_groups.at("layers/dense_2/vars");
  const json& got = w["layers"][layer][1];
  CHECK(got["shape"] == json::array({4}));
  for (int64_t i = 0; i < bias.size(); ++i)
    CHECK(got["values"][i].get<float>() == bias[i]);
  CHECK(w["optimizer"]["iterations"] == 7);
  CHECK(w["optimizer"]["variables"].size() == 22);
}

TEST_CASE("A file made from scratch (no original weights file, no groups) loads in Keras") {
  test::TempDir dir;
  auto f = read_keras(fixture("mlp.keras")).value();
  f.weights_h5.reset();
  f.weight_groups.clear();
  REQUIRE(write_keras(dir.file("scratch.keras"), f).ok());
  auto again = read_keras(dir.file("scratch.keras")).value();
  CHECK(again.weight_groups.count("layers/dense/vars") == 1);
  CHECK(again.weight_groups.count("layers/dropout/vars") == 0);  // no dataset under it
  std::string log;
  CHECK(check_roundtrip({"predict", dir.file("scratch.keras"), fixture("mlp.expected.json")},
                        log) == 0);
  INFO(log);
}

TEST_CASE("Writing keeps a dataset's stored type and gives the same bytes for the same file") {
  auto f = read_keras(fixture("batchnorm_half.keras")).value();
  f.weights.at("layers/dense/vars/1")[0] = 0.1f;
  f.weights.at("layers/batch_normalization/vars/1")[0] = 0.1f;
  auto bytes = write_keras_bytes(f, "half.keras");
  REQUIRE(bytes.ok());
  CHECK(write_keras_bytes(f, "half.keras").value() == *bytes);
  auto again = read_keras_bytes(*bytes, "half.keras").value();
  CHECK(again.weights.at("layers/dense/vars/1")[0] == 0.0999755859375f);  // 0.1 in float16
  CHECK(again.weights.at("layers/batch_normalization/vars/1")[0] == 0.1f);
  f.weights_h5.reset();  // without the original every float is float32
  auto plain = read_keras_bytes(write_keras_bytes(f, "half.keras").value(), "half.keras").value();
  CHECK(plain.weights.at("layers/dense/vars/1")[0] == 0.1f);
}

TEST_CASE("Damaged files are errors naming the file and the part at fault") {
  const std::string good = slurp(fixture("mlp.keras"));
  auto fails = [](const std::string& bytes, core::Errc code, const std::string& message) {
    auto f = read_keras_bytes(bytes, "m.keras");
    REQUIRE_FALSE(f.ok());
    INFO(f.error().message);
    CHECK(f.error().code == code);
    CHECK_THAT(f.error().message, Catch::StartsWith("m.keras: ") && Catch::Contains(message));
  };
  fails("", core::Errc::data_loss, "not a zip archive");
  fails("hello, not a zip archive at all", core::Errc::data_loss, "not a zip archive");
  fails(good.substr(0, good.size() / 2), core::Errc::data_loss, "zip");
  fails(good.substr(0, good.size() - 10), core::Errc::data_loss, "zip");
  fails(repacked(good, "config.json", nullptr), core::Errc::invalid_argument, "no config.json");
  fails(repacked(good, "model.weights.h5", nullptr), core::Errc::invalid_argument,
        "no model.weights.h5");
  fails(repacked(good, "config.json", "{\"class_name\": \"Seq"), core::Errc::data_loss,
        "config.json: not JSON");
  fails(repacked(good, "config.json", "[1, 2]"), core::Errc::invalid_argument,
        "config.json: not a JSON object");
  fails(repacked(good, "metadata.json", "keras 3"), core::Errc::data_loss,
        "metadata.json: not JSON");
  fails(repacked(good, "model.weights.h5", "not an HDF5 file, though long enough"),
        core::Errc::data_loss, "model.weights.h5: not a readable HDF5 file");
  const std::string h5 = read_zip(good, "mlp").value()[2].bytes;
  REQUIRE(h5.size() > 4096);
  fails(repacked(good, "model.weights.h5", h5.substr(0, h5.size() / 2).c_str()),
        core::Errc::data_loss, "model.weights.h5");
  // A stored entry's bytes changed in place: its CRC no longer matches.
  std::string flipped = good;
  const size_t at = flipped.find("\"class_name\"");
  REQUIRE(at != std::string::npos);
  flipped[at + 1] = 'C';
  fails(flipped, core::Errc::data_loss, "config.json");
}

TEST_CASE("Entries and datasets over the limits are refused by name") {
  const std::string good = slurp(fixture("mlp.keras"));
  KerasLimits small;
  small.zip.max_entry_bytes = 4096;
  auto f = read_keras_bytes(good, "m.keras", small);
  REQUIRE_FALSE(f.ok());
  CHECK(f.error().code == core::Errc::out_of_range);
  CHECK_THAT(f.error().message,
             Catch::StartsWith("m.keras: model.weights.h5: ") && Catch::Contains("4096"));

  KerasLimits tiny_datasets;
  tiny_datasets.h5.max_dataset_bytes = 64;
  f = read_keras_bytes(good, "m.keras", tiny_datasets);
  REQUIRE_FALSE(f.ok());
  CHECK(f.error().code == core::Errc::out_of_range);
  CHECK_THAT(f.error().message,
             Catch::StartsWith("m.keras: model.weights.h5: dataset layers/dense"));

  KerasLimits few_objects;
  few_objects.h5.max_objects = 3;
  CHECK(read_keras_bytes(good, "m.keras", few_objects).error().code == core::Errc::out_of_range);

  test::TempDir dir;
  std::ofstream(dir.file("m.keras"), std::ios::binary) << good;
  KerasLimits small_file;
  small_file.max_file_bytes = 1000;
  CHECK(read_keras(dir.file("m.keras"), small_file).error().code == core::Errc::out_of_range);
  CHECK(read_keras(dir.file("missing.keras")).error().code == core::Errc::not_found);
  CHECK(read_keras(dir.path()).error().code == core::Errc::invalid_argument);
}

TEST_CASE("A failed write leaves the existing file as it was and no temporary file") {
  test::TempDir dir;
  const std::string path = dir.file("m.keras");
  auto f = read_keras(fixture("mlp.keras")).value();
  REQUIRE(write_keras(path, f).ok());
  const std::string before = slurp(path);

  KerasFile bad = f;
  bad.config = json::object({{"layers", json::array()}});
  auto s = write_keras(path, bad);
  REQUIRE_FALSE(s.ok());
  CHECK(s.error().code == core::Errc::invalid_argument);
  CHECK_THAT(s.error().message, Catch::StartsWith(path + ": config.json: no class_name"));

  bad = f;
  bad.weights["layers/dense/vars/0/x"] = core::Tensor(core::Shape{2});  // under a dataset
  s = write_keras(path, bad);
  REQUIRE_FALSE(s.ok());
  CHECK_THAT(s.error().message, Catch::Contains("model.weights.h5"));

  bad = f;
  bad.assets["../escape.txt"] = "x";
  CHECK(write_keras(path, bad).error().code == core::Errc::invalid_argument);
  bad.assets = {{"config.json", "{}"}};
  CHECK(write_keras(path, bad).error().code == core::Errc::invalid_argument);

  CHECK(write_keras(dir.file("no/such/dir/m.keras"), f).error().code == core::Errc::io_error);
  CHECK(slurp(path) == before);
  CHECK(regular_files(dir.path()) == 1);
}

TEST_CASE("A file is written as write_keras_bytes makes it and a write cut short leaves none") {
  test::TempDir dir;
  const std::string path = dir.file("m.keras");
  auto f = read_keras(fixture("mlp.keras")).value();
  REQUIRE(write_keras(path, f).ok());
  const std::string before = slurp(path);
  CHECK(before == write_keras_bytes(f, path).value());  // streamed to the file, byte for byte
  REQUIRE(before.size() > 2048);

  // A file size limit makes a write fail after the first kilobyte: mid-archive.
  struct rlimit old {};
  REQUIRE(::getrlimit(RLIMIT_FSIZE, &old) == 0);
  struct rlimit small = old;
  small.rlim_cur = 1024;
  auto* const was = std::signal(SIGXFSZ, SIG_IGN);  // EFBIG, not the signal's default exit
  REQUIRE(::setrlimit(RLIMIT_FSIZE, &small) == 0);
  f.weights.at("layers/dense/vars/1")[0] += 1.0f;
  auto s = write_keras(path, f);
  ::setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, was);
  REQUIRE_FALSE(s.ok());
  CHECK(s.error().code == core::Errc::io_error);
  CHECK_THAT(s.error().message, Catch::StartsWith(path + ": writing "));
  CHECK(slurp(path) == before);
  CHECK(regular_files(dir.path()) == 1);
}

TEST_CASE("Assets travel as they are, and zip entries keep their order") {
  auto f = read_keras(fixture("mlp.keras")).value();
  f.assets["assets/layers/string_lookup/vocabulary.txt"] = "[UNK]\nb\na";
  auto bytes = write_keras_bytes(f, "a.keras").value();
  auto entries = read_zip(bytes, "a.keras").value();
  REQUIRE(entries.size() == 4);
  CHECK(entries[0].name == "metadata.json");
  CHECK(entries[1].name == "config.json");
  CHECK(entries[2].name == "model.weights.h5");
  CHECK(entries[3].name == "assets/layers/string_lookup/vocabulary.txt");
  auto again = read_keras_bytes(bytes, "a.keras").value();
  CHECK(again.assets == f.assets);
  CHECK(again.metadata == f.metadata);

  CHECK(write_zip({{"x", "1"}, {"x", "2"}}, "z").error().code == core::Errc::invalid_argument);
  CHECK(read_zip(write_zip({}, "z").value(), "z").value().empty());
}
