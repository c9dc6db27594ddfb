// The sparse group of the layer graph: Conv2D, the 2-D poolings, Embedding, Hashing, the
// lookups, Cross and FactorizationMachine. Hand-checked forward values, gradients against
// central differences on the CPU and the fake device (graph_check.hpp), the hashes against
// their specification's and TensorFlow's values, and the arguments Troupe refuses named.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/layers/string_hash.hpp"
#include "graph_check.hpp"

using namespace troupe::core;
using namespace troupe::core::graph;
using troupe::test::check_gradients;
using troupe::test::GraphCase;
using troupe::test::make;
using troupe::test::with_dense_in_front;

namespace {

Column float_column(const std::string& name, Shape shape, std::vector<float> values) {
  Column c;
  c.name = name;
  c.kind = ColumnKind::floats;
  c.shape = shape;
  c.floats = std::move(values);
  return c;
}

Column int_column(const std::string& name, Shape shape, std::vector<int64_t> values) {
  Column c;
  c.name = name;
  c.kind = ColumnKind::ints;
  c.shape = shape;
  c.ints = std::move(values);
  return c;
}

Column string_column(const std::string& name, Shape shape, std::vector<std::string> values) {
  Column c;
  c.name = name;
  c.kind = ColumnKind::strings;
  c.shape = shape;
  c.strings = std::move(values);
  return c;
}

Batch batch_of(std::vector<Column> columns) {
  Batch b;
  b.columns = std::move(columns);
  return b;
}

void set_weight(Graph& g, const std::string& path, std::vector<float> values) {
  for (const auto& w : g.weights())
    if (w.path == path) {
      REQUIRE(static_cast<int64_t>(values.size()) == w.weight().shape.num_elements());
      w.weight().value.set(Tensor(w.weight().shape, std::move(values)));
      return;
    }
  FAIL("no weight " << path);
}

std::vector<float> iota(int64_t n, float from = 1.0f) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    v[static_cast<size_t>(i)] = from + static_cast<float>(i);
  return v;
}

// One layer on one input; its output.
Tensor run_one(const std::string& cls, const std::string& config, TensorSpec spec, Column in,
               const std::vector<std::pair<std::string, std::vector<float>>>& weights = {}) {
  Graph g;
  const int x = g.add_input("x", spec);
  auto y = g.call(make(cls, config), {x});
  INFO((y ? std::string() : y.error().message));
  REQUIRE(y.ok());
  REQUIRE(g.set_outputs(*y, {"y"}).ok());
  for (const auto& [path, values] : weights)
    set_weight(g, path, values);
  in.name = "x";
  REQUIRE(g.feed(batch_of({in})).ok());
  auto st = g.forward(false);
  INFO((st ? std::string() : st.error().message));
  REQUIRE(st.ok());
  return Tensor::from_view(g.output(0));
}

void check_values(const Tensor& got, const std::vector<float>& want) {
  REQUIRE(got.size() == static_cast<int64_t>(want.size()));
  for (int64_t i = 0; i < got.size(); ++i) {
    INFO("element " << i);
    CHECK(got[i] == Approx(want[static_cast<size_t>(i)]).epsilon(1e-6));
  }
}

// A host layer (Hashing, a lookup) run on one input; its int64 output.
std::vector<int64_t> run_host(const std::string& cls, const std::string& config, const Column& in) {
  auto layer = make(cls, config);
  REQUIRE(layer->on_host());
  auto out = layer->build({TensorSpec{in.kind, {}}});
  INFO((out ? std::string() : out.error().message));
  REQUIRE(out.ok());
  CHECK((*out)[0].kind == ColumnKind::ints);
  auto state = layer->make_state();
  Tensor ints(in.shape, DType::int64, Device::cpu());
  std::copy(in.ints.begin(), in.ints.end(), ints.data_as<int64_t>());
  Call c;
  c.state = state.get();
  c.inputs = {Ref{in.kind, in.kind == ColumnKind::ints ? ConstTensorView(ints) : ConstTensorView(),
                  in.kind == ColumnKind::strings ? &in.strings : nullptr, in.shape}};
  auto st = layer->forward(c);
  INFO((st ? std::string() : st.error().message));
  REQUIRE(st.ok());
  const Ref& r = c.outputs.at(0);
  CHECK(r.shape == in.shape);
  return std::vector<int64_t>(r.ints(), r.ints() + r.shape.num_elements());
}

Error host_error(const std::string& cls, const std::string& config, const Column& in) {
  auto layer = make(cls, config);
  REQUIRE(layer->build({TensorSpec{in.kind, {}}}).ok());
  auto state = layer->make_state();
  Tensor ints(in.shape, DType::int64, Device::cpu());
  std::copy(in.ints.begin(), in.ints.end(), ints.data_as<int64_t>());
  Call c;
  c.state = state.get();
  c.inputs = {Ref{in.kind, in.kind == ColumnKind::ints ? ConstTensorView(ints) : ConstTensorView(),
                  in.kind == ColumnKind::strings ? &in.strings : nullptr, in.shape}};
  auto st = layer->forward(c);
  REQUIRE_FALSE(st.ok());
  return st.error();
}

std::string refusal(const std::string& cls, const std::string& config) {
  auto l = make_layer(cls, nlohmann::json::parse(config));
  REQUIRE_FALSE(l.ok());
  return l.error().message;
}

// Gives every table of the fed graph its rows from full[id * width ...].
void give_table(Graph& g, const std::vector<float>& full) {
  for (auto& t : g.tables()) {
    const auto& w = g.weights()[t.weight].weight();
    const int64_t width = w.shape[1];
    Tensor rows(Shape{static_cast<int64_t>(t.ids.size()), width});
    for (size_t r = 0; r < t.ids.size(); ++r)
      for (int64_t j = 0; j < width; ++j)
        rows[static_cast<int64_t>(r) * width + j] = full[static_cast<size_t>(t.ids[r] * width + j)];
    t.rows = std::move(rows);
  }
}

}  // namespace

// ---- The hashes -------------------------------------------------------------------------

TEST_CASE("SipHash-2-4 gives the test vector of its paper", "[sparse][hash]") {
  // Aumasson and Bernstein, appendix A: key 00 01 .. 0f, message 00 01 .. 0e.
  std::string message;
  for (int i = 0; i < 15; ++i)
    message.push_back(static_cast<char>(i));
  CHECK(siphash64(0x0706050403020100ULL, 0x0f0e0d0c0b0a0908ULL, message) == 0xa129ca6149be45e5ULL);
}

TEST_CASE("Fingerprint64 and the keyed SipHash give TensorFlow's buckets", "[sparse][hash]") {
  // tf.strings.to_hash_bucket_fast(s, 2**63 - 1) and ..._strong(s, 2**63 - 1, key=[133, 137])
  // of TensorFlow 2.21, for every length class of FarmHash (0, 1-3, 4-7, 8-16, 17-32, 33-64,
  // longer).
  auto cycle = [](int n, int from, int period) {
    std::string s;
    for (int i = 0; i < n; ++i)
      s.push_back(static_cast<char>(from + i % period));
    return s;
  };
  struct Case {
    std::string s;
    uint64_t fast, strong;
  };
  const std::vector<Case> cases = {
      {"", 1936946117179621456ULL, 4928313950774450900ULL},
      {"a", 3694432073954588132ULL, 7077939996121841354ULL},
      {"ab", 3066228220894225695ULL, 3814769135020288330ULL},
      {"abc", 2640714258260161385ULL, 6899845086433867945ULL},
      {"abcd", 1897425971756105985ULL, 7808205235328240072ULL},
      {"hello w", 1806291608031355033ULL, 3938406632290115320ULL},
      {"12345678", 3430003927990384362ULL, 6204608272998402685ULL},
      {"0123456789abcdef", 6105018409752412263ULL, 4045071960732599655ULL},
      {"0123456789abcdefg", 2800675501336285771ULL, 2112349501170619355ULL},
      {std::string(32, 'x'), 3678204687145032710ULL, 814092544179586341ULL},
      {std::string(33, 'y'), 8610735037765521150ULL, 8357397433078994573ULL},
      {"The quick brown fox jumps over the lazy dog, twice....", 8813693529629659329ULL,
       3236355577249548634ULL},
      {std::string(64, 'z'), 294799756062990872ULL, 3484376427546784576ULL},
      {std::string(65, 'w'), 3272011567211491969ULL, 2877200667339158544ULL},
      {cycle(100, 33, 90), 143994504185545689ULL, 3670896553240122848ULL},
      {cycle(200, 40, 80), 8929932893448387913ULL, 2674506782064100189ULL},
      {"-5", 8479213860049130009ULL, 971313266557102270ULL},
      {"caf\xc3\xa9", 2156005646011579780ULL, 2200240678201728455ULL},
  };
  const uint64_t buckets = (uint64_t{1} << 63) - 1;
  for (const auto& c : cases) {
    INFO("'" << c.s << "' (" << c.s.size() << " bytes)");
    CHECK(fingerprint64(c.s) % buckets == c.fast);
    CHECK(siphash64(133, 137, c.s) % buckets == c.strong);
  }
  CHECK(decimal(-9223372036854775807LL - 1) == "-9223372036854775808");
}

// ---- Hashing ----------------------------------------------------------------------------

TEST_CASE("Hashing bins as Keras's documented examples do", "[sparse][hashing]") {
  const Column abcde = string_column("x", Shape{5}, {"A", "B", "C", "D", "E"});
  CHECK(run_host("Hashing", R"({"name": "h", "num_bins": 3})", abcde) ==
        std::vector<int64_t>{1, 0, 1, 1, 2});
  CHECK(run_host("Hashing", R"({"name": "h", "num_bins": 3, "mask_value": ""})",
                 string_column("x", Shape{5}, {"A", "B", "", "C", "D"})) ==
        std::vector<int64_t>{1, 1, 0, 2, 2});
  CHECK(run_host("Hashing", R"({"name": "h", "num_bins": 3, "salt": [133, 137]})", abcde) ==
        std::vector<int64_t>{1, 2, 1, 0, 2});
  CHECK(run_host("Hashing", R"({"name": "h", "num_bins": 3, "salt": 133})", abcde) ==
        std::vector<int64_t>{0, 0, 2, 1, 0});
  // Integers hash as their decimal text (keras.layers.Hashing(num_bins=1000) in Keras 3.15).
  CHECK(run_host("Hashing",
                 R"({"name": "h", "num_bins": 1000, "dtype": {"class_name": "DTypePolicy",
                     "config": {"name": "int64"}}})",
                 int_column("x", Shape{5}, {0, 1, -5, 123456789012, INT64_MIN})) ==
        std::vector<int64_t>{735, 849, 816, 427, 112});
  // An integer mask value: bin 0, the others 1 + hash % (num_bins - 1).
  const auto masked = run_host("Hashing", R"({"name": "h", "num_bins": 1001, "mask_value": -5})",
                               int_column("x", Shape{2, 2}, {0, -5, 7, -5}));
  CHECK(masked[1] == 0);
  CHECK(masked[3] == 0);
  CHECK(masked[0] == static_cast<int64_t>(fingerprint64("0") % 1000) + 1);
  CHECK(masked[2] == static_cast<int64_t>(fingerprint64("7") % 1000) + 1);
}

TEST_CASE("Hashing refuses what it does not implement, naming it", "[sparse][hashing]") {
  CHECK_THAT(refusal("Hashing", R"({"name": "h", "num_bins": 4, "output_mode": "one_hot"})"),
             Catch::Contains("argument 'output_mode'"));
  CHECK_THAT(refusal("Hashing", R"({"name": "h", "num_bins": 0})"),
             Catch::Contains("argument 'num_bins'"));
  CHECK_THAT(refusal("Hashing", R"({"name": "h", "num_bins": 4, "salt": "pepper"})"),
             Catch::Contains("argument 'salt'"));
  auto h = make("Hashing", R"({"name": "h", "num_bins": 4, "mask_value": ""})");
  auto wrong = h->build({TensorSpec{ColumnKind::ints, {}}});
  REQUIRE_FALSE(wrong.ok());
  CHECK_THAT(wrong.error().message, Catch::Contains("'mask_value'"));
}

// ---- StringLookup and IntegerLookup -----------------------------------------------------

TEST_CASE("StringLookup assigns Keras's indices", "[sparse][lookup]") {
  const Column words = string_column("x", Shape{2, 3}, {"a", "b", "zz", "", "c", "a"});
  // One OOV index: 0; the vocabulary from 1.
  CHECK(run_host("StringLookup", R"({"name": "s", "vocabulary": ["a", "b", "c"]})", words) ==
        std::vector<int64_t>{1, 2, 0, 0, 3, 1});
  // A mask token: 0; OOV 1; the vocabulary from 2.
  CHECK(run_host("StringLookup",
                 R"({"name": "s", "vocabulary": ["a", "b", "c"], "mask_token": ""})",
                 words) == std::vector<int64_t>{2, 3, 1, 0, 4, 2});
  // Special tokens leading the vocabulary (as an asset file holds them) are not tokens.
  CHECK(run_host("StringLookup",
                 R"({"name": "s", "vocabulary": ["", "[UNK]", "a", "b", "c"], "mask_token": "",
                     "vocabulary_size": 5})",
                 words) == std::vector<int64_t>{2, 3, 1, 0, 4, 2});
  // Two OOV indices: by Fingerprint64 of the token (with a salt: SipHash), after the mask.
  const auto two =
      run_host("StringLookup",
               R"({"name": "s", "vocabulary": ["a"], "num_oov_indices": 2, "mask_token": ""})",
               string_column("x", Shape{3}, {"zz", "", "a"}));
  CHECK(two == std::vector<int64_t>{1 + static_cast<int64_t>(fingerprint64("zz") % 2), 0, 3});
  const auto salted = run_host(
      "StringLookup", R"({"name": "s", "vocabulary": ["a"], "num_oov_indices": 5, "salt": [3, 4]})",
      string_column("x", Shape{1}, {"zz"}));
  CHECK(salted[0] == static_cast<int64_t>(siphash64(3, 4, "zz") % 5));
}

TEST_CASE("IntegerLookup assigns Keras's indices", "[sparse][lookup]") {
  const Column ids = int_column("x", Shape{5}, {7, 42, -3, 0, 9});
  CHECK(run_host("IntegerLookup", R"({"name": "i", "vocabulary": [42, 7, 9]})", ids) ==
        std::vector<int64_t>{2, 1, 0, 0, 3});
  CHECK(run_host("IntegerLookup", R"({"name": "i", "vocabulary": [42, 7, 9], "mask_token": 0})",
                 ids) == std::vector<int64_t>{3, 2, 1, 0, 4});
  // Several OOV indices: floor modulo (never negative) by default, or the decimal text's hash.
  CHECK(run_host("IntegerLookup", R"({"name": "i", "vocabulary": [42], "num_oov_indices": 3})",
                 int_column("x", Shape{3}, {-3, -4, 5})) == std::vector<int64_t>{0, 2, 2});
  CHECK(run_host("IntegerLookup",
                 R"({"name": "i", "vocabulary": [42], "num_oov_indices": 3,
                     "oov_method": "farmhash"})",
                 int_column("x", Shape{1}, {-4})) ==
        std::vector<int64_t>{static_cast<int64_t>(fingerprint64("-4") % 3)});
  // Special tokens at the front, as an asset file's lines, with the oov token -1.
  CHECK(run_host("IntegerLookup", R"({"name": "i", "vocabulary": ["-1", "42", "7"]})",
                 int_column("x", Shape{2}, {7, 3})) == std::vector<int64_t>{2, 0});
}

TEST_CASE("Lookups refuse bad vocabularies and unsupported modes, naming them",
          "[sparse][lookup]") {
  CHECK_THAT(refusal("StringLookup", R"({"name": "s", "vocabulary": ["a", "b", "a"]})"),
             Catch::Contains("argument 'vocabulary'") && Catch::Contains("repeats 'a'"));
  CHECK_THAT(refusal("StringLookup", R"({"name": "s", "vocabulary": ["a", ""], "mask_token": ""})"),
             Catch::Contains("mask token"));
  CHECK_THAT(
      refusal("StringLookup", R"({"name": "s", "vocabulary": ["a"], "output_mode": "one_hot"})"),
      Catch::Contains("argument 'output_mode'"));
  CHECK_THAT(refusal("StringLookup", R"({"name": "s", "vocabulary": ["a"], "invert": true})"),
             Catch::Contains("argument 'invert'"));
  CHECK_THAT(refusal("StringLookup", R"({"name": "s", "vocabulary": null})"),
             Catch::Contains("argument 'vocabulary'") && Catch::Contains("empty"));
  CHECK_THAT(refusal("StringLookup", R"({"name": "s", "vocabulary": ["a", "b"], "max_tokens": 2})"),
             Catch::Contains("argument 'max_tokens'"));
  CHECK_THAT(refusal("StringLookup", R"({"name": "s", "vocabulary": ["a"], "vocabulary_size": 7})"),
             Catch::Contains("argument 'vocabulary_size'"));
  CHECK_THAT(refusal("IntegerLookup", R"({"name": "i", "vocabulary": ["x1"]})"),
             Catch::Contains("'x1'"));
  CHECK_THAT(refusal("IntegerLookup", R"({"name": "i", "vocabulary": [1], "num_oov_indices": 2,
                                          "salt": 5})"),
             Catch::Contains("argument 'salt'"));
  const auto e =
      host_error("StringLookup", R"({"name": "s", "vocabulary": ["a"], "num_oov_indices": 0})",
                 string_column("x", Shape{2}, {"a", "nope"}));
  CHECK_THAT(e.message, Catch::Contains("layer 's' (StringLookup)") && Catch::Contains("'nope'"));
}

// ---- Embedding --------------------------------------------------------------------------

TEST_CASE("Embedding gathers its table's rows and sums their gradients", "[sparse][embedding]") {
  Graph g;
  const int x = g.add_input("ids", {ColumnKind::ints, {2}});
  auto y = g.call(make("Embedding", R"({"name": "e", "input_dim": 4, "output_dim": 2})"), {x});
  REQUIRE(y.ok());
  CHECK(g.spec((*y)[0]).shape == std::vector<int64_t>{2, 2});
  REQUIRE(g.set_outputs(*y, {"e"}).ok());
  REQUIRE(g.weights().at(0).weight().table);
  REQUIRE(g.feed(batch_of({int_column("ids", Shape{2, 2}, {1, 3, 3, 0})})).ok());
  REQUIRE(g.tables().size() == 1);
  CHECK(g.tables()[0].ids == std::vector<int64_t>{0, 1, 3});
  give_table(g, {0, 1, 10, 11, 20, 21, 30, 31});
  REQUIRE(g.forward(true).ok());
  check_values(Tensor::from_view(g.output(0)), {10, 11, 30, 31, 30, 31, 0, 1});
  Tensor dy(Shape{2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
  g.backward({dy});
  // Row 0 (id 0): example 1's second id; row 1 (id 1): example 0's first; row 2 (id 3): both
  // others.
  check_values(g.tables()[0].row_grads, {7, 8, 1, 2, 3 + 5, 4 + 6});
}

TEST_CASE("Embedding gradients check numerically, from ids and from lookups",
          "[sparse][gradcheck]") {
  SECTION("ids [batch]") {
    GraphCase c;
    const int x = c.graph.add_input("ids", {ColumnKind::ints, {}});
    auto y =
        c.graph.call(make("Embedding", R"({"name": "e", "input_dim": 5, "output_dim": 3})"), {x});
    REQUIRE(y.ok());
    auto z = c.graph.call(make("Dense", R"({"name": "d", "units": 2})"), *y);
    REQUIRE(c.graph.set_outputs(*z, {"d"}).ok());
    check_gradients(c);
  }
  SECTION("hashed strings, then looked-up strings") {
    GraphCase c;
    c.words = {"red", "green", "blue", "cyan"};
    const int s = c.graph.add_input("colour", {ColumnKind::strings, {2}});
    auto h = c.graph.call(make("Hashing", R"({"name": "h", "num_bins": 7})"), {s});
    REQUIRE(h.ok());
    auto l =
        c.graph.call(make("StringLookup", R"({"name": "l", "vocabulary": ["red", "blue"]})"), {s});
    REQUIRE(l.ok());
    auto e1 =
        c.graph.call(make("Embedding", R"({"name": "e1", "input_dim": 7, "output_dim": 2})"), *h);
    auto e2 =
        c.graph.call(make("Embedding", R"({"name": "e2", "input_dim": 3, "output_dim": 2})"), *l);
    REQUIRE(e1.ok());
    REQUIRE(e2.ok());
    REQUIRE(c.graph.set_outputs({(*e1)[0], (*e2)[0]}, {"e1", "e2"}).ok());
    check_gradients(c);
  }
  SECTION("two tables of one input, and a third of another: each its own ids and gradients") {
    // A DeepFM's factor and linear tables (whose deduplication the graph shares).
    GraphCase c;
    c.id_range = 4;
    c.batch = 5;
    const int x = c.graph.add_input("ids", {ColumnKind::ints, {3}});
    const int other = c.graph.add_input("other", {ColumnKind::ints, {2}});
    auto v =
        c.graph.call(make("Embedding", R"({"name": "v", "input_dim": 4, "output_dim": 3})"), {x});
    auto w =
        c.graph.call(make("Embedding", R"({"name": "w", "input_dim": 4, "output_dim": 1})"), {x});
    auto u = c.graph.call(make("Embedding", R"({"name": "u", "input_dim": 4, "output_dim": 2})"),
                          {other});
    REQUIRE(v.ok());
    REQUIRE(w.ok());
    REQUIRE(u.ok());
    REQUIRE(c.graph.set_outputs({(*v)[0], (*w)[0], (*u)[0]}, {"v", "w", "u"}).ok());
    REQUIRE(c.graph.feed(troupe::test::random_batch(c)).ok());
    const auto& tables = c.graph.tables();
    REQUIRE(tables.size() == 3);
    CHECK(tables[0].ids == tables[1].ids);
    // Each table's ids are the unique ids of its own input.
    const Batch b = troupe::test::random_batch(c);
    for (size_t t : {size_t{0}, size_t{2}}) {
      const auto& col = b.column(t == 0 ? "ids" : "other")->ints;
      std::set<int64_t> want(col.begin(), col.end());
      CHECK(std::set<int64_t>(tables[t].ids.begin(), tables[t].ids.end()) == want);
      CHECK(tables[t].ids.size() == want.size());
    }
    check_gradients(c);
  }
}

TEST_CASE("Embedding refuses mask_zero and other unsupported arguments, naming them",
          "[sparse][embedding]") {
  CHECK_THAT(
      refusal("Embedding", R"({"name": "e", "input_dim": 4, "output_dim": 2, "mask_zero": true})"),
      Catch::Contains("argument 'mask_zero'"));
  CHECK_THAT(refusal("Embedding", R"({"name": "e", "input_dim": 4, "output_dim": 2,
                                      "embeddings_regularizer": {"class_name": "L2"}})"),
             Catch::Contains("argument 'embeddings_regularizer'"));
  CHECK_THAT(refusal("Embedding", R"({"name": "e", "input_dim": 0, "output_dim": 2})"),
             Catch::Contains("argument 'input_dim'"));
}

// ---- Conv2D -----------------------------------------------------------------------------

TEST_CASE("Conv2D computes valid, same-with-strides and dilated windows", "[sparse][conv]") {
  // x = 1..9 in a 3x3 image of one channel; a 2x2 kernel of ones and a bias of 0.5.
  const Column x = float_column("x", Shape{1, 3, 3, 1}, iota(9));
  const TensorSpec spec{ColumnKind::floats, {3, 3, 1}};
  const std::vector<std::pair<std::string, std::vector<float>>> w = {{"c/kernel", {1, 1, 1, 1}},
                                                                     {"c/bias", {0.5f}}};
  check_values(run_one("Conv2D", R"({"name": "c", "filters": 1, "kernel_size": 2})", spec, x, w),
               {12.5f, 16.5f, 24.5f, 28.5f});
  // "same", stride 2: one row and column of padding at the bottom and right.
  check_values(run_one("Conv2D",
                       R"({"name": "c", "filters": 1, "kernel_size": 2, "strides": 2,
                           "padding": "same"})",
                       spec, x, w),
               {12.5f, 9.5f, 15.5f, 9.5f});
  // Dilation 2: the four corners.
  check_values(run_one("Conv2D", R"({"name": "c", "filters": 1, "kernel_size": 2,
                                     "dilation_rate": 2, "activation": "relu"})",
                       spec, x, w),
               {20.5f});
  // "same", stride 1, 3x3: padding one on every side; the centre sees all nine.
  const auto same = run_one(
      "Conv2D",
      R"({"name": "c", "filters": 1, "kernel_size": 3, "padding": "same", "use_bias": false})",
      spec, x, {{"c/kernel", std::vector<float>(9, 1.0f)}});
  check_values(same, {12, 21, 16, 27, 45, 33, 24, 39, 28});
}

TEST_CASE("Conv2D gradients check numerically for each geometry", "[sparse][conv][gradcheck]") {
  const char* configs[] = {
      R"({"name": "c", "filters": 3, "kernel_size": [3, 2]})",
      R"({"name": "c", "filters": 2, "kernel_size": 3, "strides": 2, "padding": "same"})",
      R"({"name": "c", "filters": 2, "kernel_size": 2, "strides": [1, 2], "padding": "same",
          "use_bias": false, "activation": "tanh"})",
      R"({"name": "c", "filters": 2, "kernel_size": 2, "dilation_rate": 2, "activation": "relu"})",
  };
  for (const char* config : configs) {
    DYNAMIC_SECTION(config) {
      GraphCase c;
      const int x = c.graph.add_input("x", {ColumnKind::floats, {5, 6, 2}});
      const int h = with_dense_in_front(c, x, "front");
      auto y = c.graph.call(make("Conv2D", config), {h});
      REQUIRE(y.ok());
      REQUIRE(c.graph.set_outputs(*y, {"c"}).ok());
      check_gradients(c);
    }
  }
}

TEST_CASE("Conv2D refuses what Troupe does not implement, naming it", "[sparse][conv]") {
  CHECK_THAT(refusal("Conv2D", R"({"name": "c", "filters": 2, "kernel_size": 3, "groups": 2})"),
             Catch::Contains("argument 'groups'"));
  CHECK_THAT(refusal("Conv2D", R"({"name": "c", "filters": 2, "kernel_size": 3,
                                   "data_format": "channels_first"})"),
             Catch::Contains("argument 'data_format'"));
  CHECK_THAT(
      refusal("Conv2D", R"({"name": "c", "filters": 2, "kernel_size": 3, "padding": "causal"})"),
      Catch::Contains("argument 'padding'"));
  CHECK_THAT(refusal("Conv2D", R"({"name": "c", "filters": 2, "kernel_size": 3, "strides": 2,
                                   "dilation_rate": 2})"),
             Catch::Contains("argument 'dilation_rate'"));
  CHECK_THAT(refusal("Conv2D", R"({"name": "c", "filters": 2, "kernel_size": 3, "lora_rank": 4})"),
             Catch::Contains("argument 'lora_rank'"));
  Graph g;
  const int x = g.add_input("x", {ColumnKind::floats, {2, 2, 1}});
  auto y = g.call(make("Conv2D", R"({"name": "c", "filters": 1, "kernel_size": 3})"), {x});
  REQUIRE_FALSE(y.ok());
  CHECK_THAT(y.error().message, Catch::Contains("layer 'c' (Conv2D)"));
}

// ---- Pooling ----------------------------------------------------------------------------

TEST_CASE("Max and average pooling: windows clip at the edges, means exclude padding",
          "[sparse][pool]") {
  const Column x = float_column("x", Shape{1, 3, 3, 1}, iota(9));
  const TensorSpec spec{ColumnKind::floats, {3, 3, 1}};
  check_values(
      run_one("MaxPooling2D", R"({"name": "p", "pool_size": 2, "padding": "same"})", spec, x),
      {5, 6, 8, 9});
  check_values(run_one("AveragePooling2D",
                       R"({"name": "p", "pool_size": [2, 2], "padding": "same"})", spec, x),
               {3, 4.5f, 7.5f, 9});
  check_values(run_one("MaxPooling2D", R"({"name": "p", "pool_size": 2, "strides": 1})", spec, x),
               {5, 6, 8, 9});
  check_values(
      run_one("AveragePooling2D", R"({"name": "p", "pool_size": 2, "strides": [1, 1]})", spec, x),
      {3, 4, 6, 7});
  // Two channels pool separately.
  check_values(
      run_one("MaxPooling2D", R"({"name": "p", "pool_size": [1, 2]})",
              {ColumnKind::floats, {1, 2, 2}}, float_column("x", Shape{1, 1, 2, 2}, {1, 8, 5, 2})),
      {5, 8});
  check_values(
      run_one("GlobalAveragePooling2D", R"({"name": "g"})", {ColumnKind::floats, {2, 2, 2}},
              float_column("x", Shape{1, 2, 2, 2}, iota(8))),
      {4, 5});
}

TEST_CASE("Pooling gradients check numerically", "[sparse][pool][gradcheck]") {
  const std::pair<const char*, const char*> layers[] = {
      {"MaxPooling2D", R"({"name": "p", "pool_size": 2, "padding": "same"})"},
      {"MaxPooling2D", R"({"name": "p", "pool_size": 3, "strides": 1})"},
      {"AveragePooling2D", R"({"name": "p", "pool_size": 2, "strides": 1, "padding": "same"})"},
      {"AveragePooling2D", R"({"name": "p", "pool_size": [2, 3]})"},
      {"GlobalAveragePooling2D", R"({"name": "p", "keepdims": true})"},
  };
  for (const auto& [cls, config] : layers) {
    DYNAMIC_SECTION(cls << " " << config) {
      GraphCase c;
      const int x = c.graph.add_input("x", {ColumnKind::floats, {4, 5, 2}});
      const int h = with_dense_in_front(c, x, "front");
      auto y = c.graph.call(make(cls, config), {h});
      REQUIRE(y.ok());
      REQUIRE(c.graph.set_outputs(*y, {"p"}).ok());
      troupe::test::CheckOptions o;
      o.eps = 1e-3f;  // max pooling's choice must not flip within the step
      check_gradients(c, o);
    }
  }
}

TEST_CASE("Pooling refuses what Troupe does not implement, naming it", "[sparse][pool]") {
  CHECK_THAT(refusal("MaxPooling2D", R"({"name": "p", "pool_size": 2, "padding": "full"})"),
             Catch::Contains("argument 'padding'"));
  CHECK_THAT(refusal("AveragePooling2D", R"({"name": "p", "pool_size": 2,
                                             "data_format": "channels_first"})"),
             Catch::Contains("argument 'data_format'"));
  CHECK_THAT(refusal("GlobalAveragePooling2D", R"({"name": "p", "data_format": "channels_first"})"),
             Catch::Contains("argument 'data_format'"));
}

// ---- Cross ------------------------------------------------------------------------------

TEST_CASE("Cross computes x0 * (x W + b + diag_scale x) + x", "[sparse][cross]") {
  Graph g;
  const int x0 = g.add_input("x0", {ColumnKind::floats, {2}});
  const int x = g.add_input("x", {ColumnKind::floats, {2}});
  auto y = g.call(make("Cross", R"({"name": "cross", "diag_scale": 1.0})"), {x0, x});
  REQUIRE(y.ok());
  REQUIRE(g.set_outputs(*y, {"cross"}).ok());
  REQUIRE(g.weights().size() == 2);
  CHECK(g.weights()[0].path == "cross/dense_kernel");
  CHECK(g.weights()[1].path == "cross/dense_bias");
  set_weight(g, "cross/dense_kernel", {1, 2, 3, 4});
  set_weight(g, "cross/dense_bias", {0.5f, -0.5f});
  REQUIRE(g.feed(batch_of({float_column("x0", Shape{1, 2}, {1, 2}),
                           float_column("x", Shape{1, 2}, {3, 4})}))
              .ok());
  REQUIRE(g.forward(false).ok());
  // p = [3, 4] W + b + [3, 4] = [18.5, 25.5]; y = [1, 2] * p + [3, 4].
  check_values(Tensor::from_view(g.output(0)), {21.5f, 55});

  Graph low;
  const int a = low.add_input("a", {ColumnKind::floats, {3}});
  auto z = low.call(make("Cross", R"({"name": "c", "projection_dim": 1, "use_bias": false})"), {a});
  REQUIRE(z.ok());
  REQUIRE(low.set_outputs(*z, {"c"}).ok());
  REQUIRE(low.weights().size() == 2);
  CHECK(low.weights()[0].weight().shape == Shape{3, 1});
  CHECK(low.weights()[1].weight().shape == Shape{1, 3});
  set_weight(low, "c/dense_u_kernel", {1, 0, 1});
  set_weight(low, "c/dense_v_kernel", {1, 2, 3});
  REQUIRE(low.feed(batch_of({float_column("a", Shape{1, 3}, {2, 5, 1})})).ok());
  REQUIRE(low.forward(false).ok());
  // x U = 3; p = [3, 6, 9]; y = x * p + x.
  check_values(Tensor::from_view(low.output(0)), {8, 35, 10});
}

TEST_CASE("Cross gradients check numerically", "[sparse][cross][gradcheck]") {
  const char* configs[] = {
      R"({"name": "cross"})",
      R"({"name": "cross", "projection_dim": 2, "diag_scale": 0.5})",
      R"({"name": "cross", "use_bias": false, "diag_scale": 2})",
  };
  for (const char* config : configs) {
    DYNAMIC_SECTION("x0 and x, " << config) {
      GraphCase c;
      const int a = c.graph.add_input("a", {ColumnKind::floats, {4}});
      const int b = c.graph.add_input("b", {ColumnKind::floats, {4}});
      const int x0 = with_dense_in_front(c, a, "front0");
      const int x = with_dense_in_front(c, b, "front1");
      auto y = c.graph.call(make("Cross", config), {x0, x});
      REQUIRE(y.ok());
      REQUIRE(c.graph.set_outputs(*y, {"cross"}).ok());
      check_gradients(c);
    }
    DYNAMIC_SECTION("x0 alone, " << config) {
      GraphCase c;
      const int a = c.graph.add_input("a", {ColumnKind::floats, {4}});
      const int x0 = with_dense_in_front(c, a, "front");
      auto y = c.graph.call(make("Cross", config), {x0});
      REQUIRE(y.ok());
      REQUIRE(c.graph.set_outputs(*y, {"cross"}).ok());
      check_gradients(c);
    }
  }
}

TEST_CASE("Cross refuses a preactivation and bad arguments, naming them", "[sparse][cross]") {
  CHECK_THAT(refusal("Cross", R"({"name": "c", "preactivation": "relu"})"),
             Catch::Contains("argument 'preactivation'"));
  CHECK_THAT(refusal("Cross", R"({"name": "c", "diag_scale": -1})"),
             Catch::Contains("argument 'diag_scale'"));
  CHECK_THAT(refusal("Cross", R"({"name": "c", "projection_dim": 0})"),
             Catch::Contains("argument 'projection_dim'"));
  CHECK_THAT(
      refusal("Custom>Cross", R"({"name": "c", "kernel_regularizer": {"class_name": "L2"}})"),
      Catch::Contains("argument 'kernel_regularizer'"));
  Graph g;
  const int a = g.add_input("a", {ColumnKind::floats, {3}});
  const int b = g.add_input("b", {ColumnKind::floats, {4}});
  auto y = g.call(make("Cross", R"({"name": "c"})"), {a, b});
  REQUIRE_FALSE(y.ok());
  CHECK_THAT(y.error().message, Catch::Contains("layer 'c' (Cross)"));
}

// ---- FactorizationMachine ---------------------------------------------------------------

TEST_CASE("FactorizationMachine sums the pairwise products of its fields", "[sparse][fm]") {
  // Fields [1, 2] and [3, 4]: <f0, f1> = 11; fields [1, 0], [0, 1], [2, 2]: 0 + 2 + 2 = 4.
  check_values(
      run_one("troupe>FactorizationMachine", R"({"name": "fm"})", {ColumnKind::floats, {2, 2}},
              float_column("x", Shape{1, 2, 2}, {1, 2, 3, 4})),
      {11});
  check_values(run_one("FactorizationMachine", R"({"name": "fm"})", {ColumnKind::floats, {3, 2}},
                       float_column("x", Shape{1, 3, 2}, {1, 0, 0, 1, 2, 2})),
               {4});
  CHECK_THAT(refusal("FactorizationMachine", R"({"name": "fm", "units": 3})"),
             Catch::Contains("argument 'units'"));
}

TEST_CASE("FactorizationMachine gradients check numerically, as DeepFM uses it",
          "[sparse][fm][gradcheck]") {
  // ids [batch, F] -> Embedding -> [batch, F, k] -> FM: the table rows' gradients pass
  // through the FM's backward pass.
  GraphCase c;
  const int ids = c.graph.add_input("ids", {ColumnKind::ints, {4}});
  auto e =
      c.graph.call(make("Embedding", R"({"name": "e", "input_dim": 5, "output_dim": 3})"), {ids});
  REQUIRE(e.ok());
  auto fm = c.graph.call(make("FactorizationMachine", R"({"name": "fm"})"), *e);
  REQUIRE(fm.ok());
  REQUIRE(c.graph.set_outputs(*fm, {"fm"}).ok());
  check_gradients(c);
}
