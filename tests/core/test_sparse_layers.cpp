// The sparse group of the layer graph: Embedding, Hashing, the lookups, Cross and
// FactorizationMachine (Conv2D and the 2-D poolings: test_conv_layers.cpp). Hand-checked forward
// values, gradients against central differences on the CPU and the fake device (graph_check.hpp),
// the hashes against their specification's and TensorFlow's values, and the arguments Troupe
// refuses named.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/layers/string_hash.hpp"
#include "graph_check.hpp"
#include "sparse_layer_helpers.hpp"

using namespace troupe::core;
using namespace troupe::core::graph;
using namespace troupe::core::layers;
using troupe::test::check_gradients;
using troupe::test::GraphCase;
using troupe::test::make;
using troupe::test::with_dense_in_front;

using namespace troupe::test::sparse;

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

TEST_CASE("Tables share a deduplication by tensor and by content, each gathering its own rows",
          "[sparse][embedding]") {
  // a reads `ids`; b and c read `again`, another tensor fed the same ids: b shares a's
  // deduplication by content, c shares b's by tensor (and so a's).
  Graph g;
  const int ids = g.add_input("ids", {ColumnKind::ints, {2}});
  const int again = g.add_input("again", {ColumnKind::ints, {2}});
  std::vector<int> out;
  for (const auto& [name, from] :
       {std::pair<const char*, int>{"a", ids}, {"b", again}, {"c", again}}) {
    auto y = g.call(make("Embedding", std::string(R"({"name": ")") + name +
                                          R"(", "input_dim": 4, "output_dim": 1})"),
                    {from});
    REQUIRE(y.ok());
    out.push_back((*y)[0]);
  }
  REQUIRE(g.set_outputs(out, {"a", "b", "c"}).ok());
  for (int step = 0; step < 2; ++step) {  // the second step reuses the first's buffers
    const std::vector<int64_t> v =
        step == 0 ? std::vector<int64_t>{3, 1, 1, 0} : std::vector<int64_t>{2, 2, 0, 3};
    REQUIRE(
        g.feed(batch_of({int_column("ids", Shape{2, 2}, v), int_column("again", Shape{2, 2}, v)}))
            .ok());
    REQUIRE(g.tables().size() == 3);
    for (size_t t = 0; t < 3; ++t) {
      const std::vector<int64_t> want =
          step == 0 ? std::vector<int64_t>{0, 1, 3} : std::vector<int64_t>{0, 2, 3};
      CHECK(g.tables()[t].ids == want);
      // Table t's row of id r holds 10 (t + 1) + r.
      Tensor rows(Shape{3, 1});
      for (int64_t r = 0; r < 3; ++r)
        rows[r] = static_cast<float>(10 * (t + 1) + want[static_cast<size_t>(r)]);
      g.tables()[t].rows = rows;
    }
    REQUIRE(g.forward(false).ok());
    for (size_t o = 0; o < 3; ++o) {
      INFO("output " << o << ", step " << step);
      std::vector<float> want;
      for (int64_t id : v)
        want.push_back(static_cast<float>(10 * (o + 1) + id));
      check_values(Tensor::from_view(g.output(o)), want);
    }
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
