// Keras's operations as graph nodes (core/ops): every family's gradients checked against
// finite differences on the CPU and the fake device (graph_check.hpp), broadcasting and
// negative axes included, and the calls Troupe refuses (those that would mix a batch's
// examples, unknown classes, bad arguments) refused by name. Their forward values are
// checked against Keras itself in test_ops_reference.cpp.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "ops_helpers.hpp"

using namespace troupe::core;
using namespace troupe::core::graph;
using troupe::test::call_op;
using troupe::test::check_gradients;
using troupe::test::CheckOptions;
using troupe::test::GraphCase;
using troupe::test::identity_input;
using troupe::test::op_error;

namespace {

// Finer differences than the layers' default: the operations' inputs sit at least 0.05
// from the kinks at 0 and the differences must not cross them.
CheckOptions fine() {
  CheckOptions o;
  o.eps = 2e-3f;
  o.abs_tol = 3e-3;
  o.rel_tol = 2e-2;
  return o;
}

void outputs(GraphCase& g, const std::vector<int>& ids) {
  std::vector<std::string> names;
  for (size_t i = 0; i < ids.size(); ++i)
    names.push_back("y" + std::to_string(i));
  auto st = g.graph.set_outputs(ids, names);
  INFO((st ? std::string() : st.error().message));
  REQUIRE(st.ok());
}

}  // namespace

TEST_CASE("Arithmetic operations broadcast tensors and constants, with their gradients",
          "[ops][graph]") {
  GraphCase g;
  const int x = identity_input(g, "x", {3, 4});
  const int b = identity_input(g, "b", {1, 4});
  const int c = identity_input(g, "c", {4});
  const int c1 = call_op(g, "ExpandDims", R"({"axis": 1})", R"(["$0"])", {c})[0];
  std::vector<int> ys;
  auto one = [&](const char* cls, const char* args, std::vector<int> in) {
    ys.push_back(call_op(g, cls, "{}", args, in)[0]);
  };
  one("Add", R"(["$0", "$1"])", {x, b});
  one("Subtract", R"(["$0", "$1"])", {x, c1});  // (None, 3, 4) - (None, 1, 4)
  one("Subtract", R"([2.0, "$0"])", {x});
  one("Multiply", R"(["$0", "$0"])", {x});
  one("Multiply",
      R"(["$0", {"class_name": "__numpy__", "config": {"value": [[0.5], [2], [-1]], "dtype": "float32"}}])",
      {x});
  one("Add",
      R"(["$0", {"class_name": "__tensor__", "config": {"value": [1, -2, 3, 0.5], "dtype": "float32"}}])",
      {c});
  const int e = call_op(g, "Exp", "{}", R"(["$0"])", {b})[0];
  one("Divide", R"(["$0", "$1"])", {x, e});
  one("TrueDivide", R"(["$0", 3])", {c});
  const int ex = call_op(g, "Exp", "{}", R"(["$0"])", {x})[0];
  one("Power", R"(["$0", 2.0])", {ex});
  one("Power", R"(["$0", "$1"])", {ex, b});
  one("Maximum", R"(["$0", "$1"])", {x, b});
  one("Minimum", R"(["$0", -0.02])", {x});
  const int mask = call_op(g, "Greater", "{}", R"(["$0", 0])", {x})[0];
  ys.push_back(call_op(g, "Where", "{}", R"(["$0", "$1", "$2"])", {mask, x, b})[0]);
  ys.push_back(call_op(g, "Clip", R"({"x_min": -0.5, "x_max": 0.5})", R"(["$0"])", {x})[0]);
  outputs(g, ys);
  check_gradients(g, fine());
}

TEST_CASE("Element-wise functions and softmax over any axis, with their gradients",
          "[ops][graph]") {
  GraphCase g;
  const int x = identity_input(g, "x", {3, 5});
  std::vector<int> ys;
  for (const char* cls : {"Negative", "Exp", "Square", "Absolute", "Tanh", "Sigmoid", "Relu", "Erf",
                          "LogSigmoid", "Softplus", "Silu", "Selu", "Elu", "LeakyRelu"})
    ys.push_back(call_op(g, cls, "{}", R"(["$0"])", {x})[0]);
  ys.push_back(call_op(g, "Gelu", R"({"approximate": true})", R"(["$0"])", {x})[0]);
  ys.push_back(call_op(g, "Gelu", R"({"approximate": false})", R"(["$0"])", {x})[0]);
  const int e = call_op(g, "Exp", "{}", R"(["$0"])", {x})[0];
  for (const char* cls : {"Log", "Log1p", "Sqrt", "Reciprocal"})
    ys.push_back(call_op(g, cls, "{}", R"(["$0"])", {e})[0]);
  for (int axis : {-1, 1, 2})
    for (const char* cls : {"Softmax", "LogSoftmax"})
      ys.push_back(
          call_op(g, cls, R"({"axis": )" + std::to_string(axis) + "}", R"(["$0"])", {x})[0]);
  outputs(g, ys);
  check_gradients(g, fine());
}

TEST_CASE("Reductions over axes with keepdims, with their gradients", "[ops][graph]") {
  GraphCase g;
  const int x = identity_input(g, "x", {3, 4, 2});
  std::vector<int> ys;
  ys.push_back(call_op(g, "Sum", R"({"axis": 1, "keepdims": false})", R"(["$0"])", {x})[0]);
  ys.push_back(call_op(g, "Sum", R"({"axis": [1, 3], "keepdims": true})", R"(["$0"])", {x})[0]);
  ys.push_back(call_op(g, "Mean", R"({"axis": [-2, -1]})", R"(["$0"])", {x})[0]);
  ys.push_back(call_op(g, "Max", R"({"axis": 2, "initial": null})", R"(["$0"])", {x})[0]);
  ys.push_back(call_op(g, "Min", R"({"axis": -1, "keepdims": true})", R"(["$0"])", {x})[0]);
  ys.push_back(call_op(g, "Prod", R"({"axis": [1, 3], "dtype": null})", R"(["$0"])", {x})[0]);
  // argmax passes no gradient: the graph leaves it out of the backward pass.
  ys.push_back(call_op(g, "Argmax", R"({"axis": 1})", R"(["$0"])", {x})[0]);
  outputs(g, ys);
  check_gradients(g, fine());
}

TEST_CASE("Shape operations, joins and splits, with their gradients", "[ops][graph]") {
  GraphCase g;
  const int x = identity_input(g, "x", {3, 4});
  const int v = identity_input(g, "v", {4});
  std::vector<int> ys;
  auto one = [&](const char* cls, const std::string& config, const char* args,
                 std::vector<int> in) {
    for (int y : call_op(g, cls, config, args, in))
      ys.push_back(y);
  };
  one("ExpandDims", R"({"axis": -1})", R"(["$0"])", {v});
  const int e = call_op(g, "ExpandDims", R"({"axis": 1})", R"(["$0"])", {v})[0];
  one("Squeeze", R"({"axis": 1})", R"(["$0"])", {e});
  one("Reshape", R"({"newshape": [-1, 2, 6]})", R"(["$0"])", {x});
  one("Transpose", R"({"axes": [0, 2, 1]})", R"(["$0"])", {x});
  one("Swapaxes", R"({"axis1": -1, "axis2": 1})", R"(["$0"])", {x});
  one("Moveaxis", R"({"source": [1], "destination": [-1]})", R"(["$0"])", {e});
  one("BroadcastTo", R"({"shape": [null, 3, 4]})", R"(["$0"])", {e});
  one("Tile", R"({"repeats": [1, 2, 3]})", R"(["$0"])", {x});
  one("Tile", R"({"repeats": [2]})", R"(["$0"])", {v});
  one("Repeat", R"({"repeats": 2, "axis": -1})", R"(["$0"])", {x});
  one("Concatenate", R"({"axis": 1})", R"([["$0", "$1", "$0"]])", {x, e});
  one("Stack", R"({"axis": -1})", R"([["$0", "$0"]])", {v});
  one("Split", R"({"indices_or_sections": 2, "axis": 2})", R"(["$0"])", {x});
  one("Split", R"({"indices_or_sections": [1], "axis": 1})", R"(["$0"])", {x});
  one("Unstack", R"({"num": null, "axis": 1})", R"(["$0"])", {x});
  outputs(g, ys);
  check_gradients(g, fine());
}

TEST_CASE("Indexing: slices with steps, None, Ellipsis, and take, with their gradients",
          "[ops][graph]") {
  GraphCase g;
  const int x = identity_input(g, "x", {4, 5});
  std::vector<int> ys;
  const std::string all =
      R"({"class_name": "__slice__", "config": {"start": null, "stop": null, "step": null}})";
  auto slice = [](const char* start, const char* stop, const char* step) {
    return std::string(R"({"class_name": "__slice__", "config": {"start": )") + start +
           R"(, "stop": )" + stop + R"(, "step": )" + step + "}}";
  };
  for (const std::string& key : std::vector<std::string>{
           "[" + all + ", -1]", "[" + all + ", " + slice("null", "null", "-1") + "]",
           "[" + all + ", " + slice("3", "0", "-2") + ", " + slice("null", "null", "3") + "]",
           R"([{"class_name": "__ellipsis__", "config": {}}, 1])", "[" + all + ", null, 2]"})
    ys.push_back(call_op(g, "GetItem", "{}", R"(["$0", )" + key + "]", {x})[0]);
  ys.push_back(call_op(
      g, "Take", R"({"axis": 2})",
      R"(["$0", {"class_name": "__numpy__", "config": {"value": [[4, 0], [-1, 4]], "dtype": "int64"}}])",
      {x})[0]);
  outputs(g, ys);
  check_gradients(g, fine());
}

TEST_CASE("matmul and einsum as attention writes them, with their gradients", "[ops][graph]") {
  GraphCase g;
  const int x = identity_input(g, "x", {3, 4});
  const int y = identity_input(g, "y", {4, 2});
  const int q = identity_input(g, "q", {5, 2, 3});
  const int k = identity_input(g, "k", {6, 2, 3});
  std::vector<int> ys;
  auto one = [&](const char* cls, const std::string& config, const std::string& args,
                 std::vector<int> in) { ys.push_back(call_op(g, cls, config, args, in)[0]); };
  one("Matmul", "{}", R"(["$0", "$1"])", {x, y});
  one("Matmul", "{}",
      R"(["$0", {"class_name": "__numpy__", "config": {"value": [[1, 0.5], [2, -1], [0, 3], [-1, 1]], "dtype": "float32"}}])",
      {x});
  one("Matmul", "{}", R"(["$0", "$0"])",
      {call_op(g, "Reshape", R"({"newshape": [-1, 2, 2, 2]})", R"(["$0"])", {y})[0]});
  one("Einsum", R"({"subscripts": "aecd,abcd->acbe"})", R"(["$0", "$1"])", {q, k});
  one("Einsum", R"({"subscripts": "bqhd,bkhd->bhqk"})", R"(["$0", "$1"])", {q, k});
  one("Einsum", R"({"subscripts": "bij,jk->bik"})",
      R"(["$0", {"class_name": "__numpy__", "config": {"value": [[1, 2], [3, 4], [5, 6], [7, 8]], "dtype": "float32"}}])",
      {x});
  one("Einsum", R"({"subscripts": "bij->bj"})", R"(["$0"])", {x});
  one("Einsum", R"({"subscripts": "bij,bkj->bik"})", R"(["$0", "$1"])", {x, x});
  outputs(g, ys);
  check_gradients(g, fine());
}

TEST_CASE("Operations that would mix a batch's examples are refused by name", "[ops][graph]") {
  GraphCase g;
  const int x = g.graph.add_input("x", {ColumnKind::floats, {3, 4}});
  const int ids = g.graph.add_input("ids", {ColumnKind::ints, {3}});
  auto refused = [&](const char* cls, const std::string& config, const std::string& args,
                     std::vector<int> in, const std::string& says) {
    const std::string e = op_error(g, cls, config, args, in);
    INFO(cls << ": " << e);
    CHECK(e.find("operation 'op' (" + std::string(cls) + ")") != std::string::npos);
    CHECK(e.find(says) != std::string::npos);
  };
  refused("Sum", R"({"axis": null})", R"(["$0"])", {x}, "batch");
  refused("Mean", R"({"axis": 0})", R"(["$0"])", {x}, "batch axis");
  refused("Transpose", R"({"axes": [1, 0, 2]})", R"(["$0"])", {x}, "batch axis");
  refused("Reshape", R"({"newshape": [12, -1]})", R"(["$0"])", {x}, "batch's");
  refused("Tile", R"({"repeats": [2, 1, 1]})", R"(["$0"])", {x}, "batch axis");
  refused(
      "Add", "{}",
      R"(["$0", {"class_name": "__numpy__", "config": {"value": [[[1]], [[2]]], "dtype": "float32"}}])",
      {x}, "batch axis");
  refused("GetItem", "{}", R"(["$0", 0])", {x}, "batch axis");
  refused("Take", R"({"axis": 1})", R"(["$0", "$1"])", {x, ids}, "mix the examples");
  refused("Add", "{}", R"(["$0", 1])", {ids}, "float tensors");
  refused("Cast", R"({"dtype": "int32"})", R"(["$0"])", {x}, "integers");
  refused("Matmul", "{}", R"(["$0", "$0"])", {x}, "cannot multiply");
  refused("Einsum", R"({"subscripts": "bii->bi"})", R"(["$0"])", {x}, "repeats index");
  refused("Cumsum", R"({"axis": 1})", R"(["$0"])", {x}, "no operation of this class");
  refused("ExpandDims", R"({"axis": 1, "foo": 2})", R"(["$0"])", {x}, "'foo'");
  // A file may hold any number: sizes that would overflow, or exceed Troupe's limits, are
  // refused before anything is computed with them.
  refused("Tile", R"({"repeats": [1, 1099511627776, 1]})", R"(["$0"])", {x}, "size limit");
  refused("Repeat", R"({"repeats": 4611686018427387904, "axis": 1})", R"(["$0"])", {x},
          "size limit");
  refused("Reshape", R"({"newshape": [-1, 4294967296, 4294967296, 12]})", R"(["$0"])", {x},
          "size limit");
  refused("Moveaxis", R"({"source": [1, 1], "destination": [1, 2]})", R"(["$0"])", {x}, "twice");
  refused("Einsum", R"({"subscripts": "bij->bii"})", R"(["$0"])", {x}, "in the result");
  refused("Take", R"({"axis": 1})",
          R"(["$0", {"class_name": "__numpy__", "config": {"value": [1e30], "dtype": "float32"}}])",
          {x}, "outside axis");
  refused("Clip", R"({"x_min": -1e300, "x_max": 1.0})", R"(["$0"])", {x}, "float32's range");
}

TEST_CASE("A slice step longer than its axis takes one element, whatever its size",
          "[ops][graph]") {
  GraphCase g;
  const int x = identity_input(g, "x", {4, 5});
  const std::string all =
      R"({"class_name": "__slice__", "config": {"start": null, "stop": null, "step": null}})";
  const int y = call_op(
      g, "GetItem", "{}",
      R"(["$0", [)" + all +
          R"(, {"class_name": "__slice__", "config": {"start": 1, "stop": null, "step": 9223372036854775807}}]])",
      {x})[0];
  CHECK(g.graph.spec(y) == TensorSpec{ColumnKind::floats, {1, 5}});
  const int z = call_op(
      g, "GetItem", "{}",
      R"(["$0", [)" + all +
          R"(, {"class_name": "__slice__", "config": {"start": null, "stop": null, "step": -9223372036854775807}}]])",
      {x})[0];
  CHECK(g.graph.spec(z) == TensorSpec{ColumnKind::floats, {1, 5}});
  outputs(g, {y, z});
  check_gradients(g, fine());
}

TEST_CASE("Shape operations of integer ids run on the host, before the device part",
          "[ops][graph]") {
  GraphCase g;
  const int ids = g.graph.add_input("ids", {ColumnKind::ints, {3}});
  const int e = call_op(g, "ExpandDims", R"({"axis": -1})", R"(["$0"])", {ids})[0];
  CHECK(g.graph.spec(e) == TensorSpec{ColumnKind::ints, {3, 1}});
  const int f = call_op(g, "Cast", R"({"dtype": "float32"})", R"(["$0"])", {e})[0];
  const int h = call_op(g, "OneHot", R"({"num_classes": 4})", R"(["$0"])", {ids})[0];
  REQUIRE(g.graph.set_outputs({f, h}, {"f", "h"}).ok());
  Batch batch;
  Column c;
  c.name = "ids";
  c.kind = ColumnKind::ints;
  c.shape = Shape{2, 3};
  c.ints = {0, 3, 9, 2, 1, 2};
  batch.columns.push_back(c);
  REQUIRE(g.graph.feed(batch).ok());
  REQUIRE(g.graph.forward(false).ok());
  Tensor got = Tensor::from_view(g.graph.output(0));
  CHECK(got.shape() == Shape{2, 3, 1});
  CHECK(std::vector<float>(got.data(), got.data() + 6) == std::vector<float>{0, 3, 9, 2, 1, 2});
  Tensor hot = Tensor::from_view(g.graph.output(1));
  CHECK(hot.shape() == Shape{2, 3, 4});
  // Row of id 9 (outside 4 classes) is zeros, as Keras's one_hot gives.
  std::vector<float> row9(hot.data() + 8, hot.data() + 12);
  CHECK(row9 == std::vector<float>{0, 0, 0, 0});
  CHECK(hot[4 + 3] == 1.0f);
}

TEST_CASE("A model is placed only on a backend that has every kernel its nodes call",
          "[ops][graph]") {
  troupe::test::FakeCuda fake(1);
  fake.fake(0).lacks = {Kernel::matmul};
  GraphCase g;
  const int x = identity_input(g, "x", {3, 4});
  const int t = call_op(g, "Transpose", R"({"axes": [0, 2, 1]})", R"(["$0"])", {x})[0];
  const int y = call_op(g, "Matmul", R"({"name": "scores"})", R"(["$0", "$1"])", {x, t})[0];
  outputs(g, {y});
  auto st = g.graph.to(Device::cuda(0));
  REQUIRE_FALSE(st.ok());
  INFO(st.error().message);
  CHECK(st.error().message.find("operation 'scores' (Matmul)") != std::string::npos);
  CHECK(st.error().message.find("kernel 'matmul'") != std::string::npos);
  CHECK(st.error().message.find("fake cuda:0") != std::string::npos);
  // Nothing moved: the model stays whole where it was, and trains there.
  CHECK(g.graph.device() == Device::cpu());
  for (const auto& w : g.graph.weights())
    CHECK(w.weight().value.device() == Device::cpu());
  fake.fake(0).lacks.clear();
  CHECK(g.graph.to(Device::cuda(0)).ok());
  CHECK(g.graph.to(Device::cpu()).ok());
}

TEST_CASE("Reductions and products over empty axes give their identities, reading nothing",
          "[ops][graph]") {
  // A fuzzed file found it: x[:, 1:] of an axis of size 1 is empty, and a reduction over it
  // read its first element.
  GraphCase g;
  const int x = g.graph.add_input("x", {ColumnKind::floats, {1, 3}});
  const std::string all =
      R"({"class_name": "__slice__", "config": {"start": null, "stop": null, "step": null}})";
  const int e = call_op(
      g, "GetItem", "{}",
      R"(["$0", [)" + all +
          R"(, {"class_name": "__slice__", "config": {"start": 1, "stop": null, "step": null}}]])",
      {x})[0];
  CHECK(g.graph.spec(e) == TensorSpec{ColumnKind::floats, {0, 3}});
  const int sum = call_op(g, "Sum", R"({"axis": 1})", R"(["$0"])", {e})[0];
  const int mx = call_op(g, "Max", R"({"axis": 1})", R"(["$0"])", {e})[0];
  const int prod = call_op(g, "Prod", R"({"axis": 1})", R"(["$0"])", {e})[0];
  const int mm =
      call_op(g, "Einsum", R"({"subscripts": "bij,bik->bjk"})", R"(["$0", "$1"])", {e, e})[0];
  outputs(g, {sum, mx, prod, mm});
  Batch batch;
  Column c;
  c.name = "x";
  c.kind = ColumnKind::floats;
  c.shape = Shape{2, 1, 3};
  c.floats = {1, 2, 3, 4, 5, 6};
  batch.columns.push_back(c);
  REQUIRE(g.graph.feed(batch).ok());
  REQUIRE(g.graph.forward(false).ok());
  const Tensor s = Tensor::from_view(g.graph.output(0)), m = Tensor::from_view(g.graph.output(1));
  const Tensor p = Tensor::from_view(g.graph.output(2)), z = Tensor::from_view(g.graph.output(3));
  for (int64_t i = 0; i < 6; ++i) {
    CHECK(s[i] == 0.0f);
    CHECK(std::isinf(m[i]));
    CHECK(m[i] < 0.0f);
    CHECK(p[i] == 1.0f);
  }
  CHECK(z.shape() == Shape{2, 3, 3});
  for (int64_t i = 0; i < z.size(); ++i)
    CHECK(z[i] == 0.0f);
}
