// The sparse group's layers against Keras itself (fixtures of tests/keras/sparse_fixtures.py):
// Conv2D, the poolings, Embedding, FactorizationMachine and Cross within 1e-5 of Keras's
// float32 outputs; Hashing, StringLookup and IntegerLookup exactly equal to Keras's int64
// outputs. The cases tagged [tensorflow] read fixtures that only an environment with
// TensorFlow makes (Keras 3 runs those layers through tf.strings and tf.lookup).
#include <catch2/catch.hpp>

#include <fstream>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "core/layers/layers.hpp"
#include "keras_reference.hpp"

using namespace troupe::core;
using namespace troupe::core::graph;
using namespace troupe::core::layers;
using troupe::test::check_against_keras;
using troupe::test::column_from;

namespace {

// Fixture layers/sparse_host_<name>.json: one host layer built from Keras's config, run on
// Keras's input, its indices compared one by one.
void check_host_layer(const std::string& name) {
  const std::string path = troupe::test::fixtures_dir() + "/layers/sparse_host_" + name + ".json";
  std::ifstream in(path);
  INFO("fixture " << path);
  REQUIRE(in.good());
  const auto doc = nlohmann::json::parse(in);
  nlohmann::json config = doc["layer"]["config"];
  std::map<std::string, std::string> assets;
  if (doc.contains("assets")) {
    // The vocabulary is a file of the archive's assets, under the layer's saved path; the
    // config names it as the model's builder does for a lookup layer it reads from a file.
    REQUIRE(doc["assets"].size() == 1);
    for (const auto& [file, text] : doc["assets"].items()) {
      assets[file] = text.get<std::string>();
      config["vocabulary"] = file;
    }
  }
  auto layer = troupe::core::layers::make_layer(doc["layer"]["class_name"].get<std::string>(),
                                                config, &assets);
  INFO((layer ? std::string() : layer.error().message));
  REQUIRE(layer.ok());
  REQUIRE((*layer)->on_host());
  const Column x = column_from("x", doc["input"]);
  const Column want = column_from("y", doc["output"]);
  auto out = (*layer)->build({TensorSpec{x.kind, {}}});
  REQUIRE(out.ok());
  auto state = (*layer)->make_state();
  Tensor ints(x.shape, DType::int64, Device::cpu());
  std::copy(x.ints.begin(), x.ints.end(), ints.data_as<int64_t>());
  Call c;
  c.state = state.get();
  c.inputs = {Ref{x.kind, x.kind == ColumnKind::ints ? ConstTensorView(ints) : ConstTensorView(),
                  x.kind == ColumnKind::strings ? &x.strings : nullptr, x.shape}};
  auto st = (*layer)->forward(c);
  INFO((st ? std::string() : st.error().message));
  REQUIRE(st.ok());
  const Ref& y = c.outputs.at(0);
  REQUIRE(y.shape.num_elements() == static_cast<int64_t>(want.ints.size()));
  int64_t differ = 0;
  for (size_t i = 0; i < want.ints.size(); ++i)
    if (y.ints()[i] != want.ints[i]) {
      if (differ++ < 5)
        UNSCOPED_INFO("element " << i << " ("
                                 << (x.kind == ColumnKind::strings ? "'" + x.strings[i] + "'"
                                                                   : std::to_string(x.ints[i]))
                                 << "): troupe " << y.ints()[i] << ", keras " << want.ints[i]);
    }
  CHECK(differ == 0);
}

}  // namespace

TEST_CASE("Conv2D matches Keras: strides, uneven same padding, dilation, activations",
          "[sparse][keras_reference]") {
  check_against_keras("sparse_conv");
}

TEST_CASE("Max, average and global average pooling match Keras", "[sparse][keras_reference]") {
  check_against_keras("sparse_pooling");
}

TEST_CASE("Embedding and FactorizationMachine match Keras", "[sparse][keras_reference]") {
  check_against_keras("sparse_embedding_fm");
}

TEST_CASE("Cross (DCN-v2, full and low rank) matches its Keras definition",
          "[sparse][keras_reference]") {
  check_against_keras("sparse_cross");
}

TEST_CASE("Hashing gives Keras's bins exactly", "[sparse][keras_reference][tensorflow]") {
  for (const char* name : {"hash_strings", "hash_ints", "hash_mask", "hash_int_mask", "hash_salted",
                           "hash_int_salted"})
    DYNAMIC_SECTION(name) {
      check_host_layer(name);
    }
}

TEST_CASE("StringLookup and IntegerLookup give Keras's indices exactly",
          "[sparse][keras_reference][tensorflow]") {
  for (const char* name :
       {"string_lookup", "string_lookup_mask_oov3", "string_lookup_salted", "string_lookup_file",
        "integer_lookup", "integer_lookup_mask_floormod", "integer_lookup_farmhash"})
    DYNAMIC_SECTION(name) {
      check_host_layer(name);
    }
}

TEST_CASE("A model of string and integer inputs through lookups and embeddings matches Keras",
          "[sparse][keras_reference][tensorflow]") {
  check_against_keras("sparse_lookup_model");
}
