// Keras's operations against Keras itself: each fixture of tests/keras/ops_fixtures.py (a
// Functional model of keras.ops calls, its inputs, and what Keras's predict() gave) built as
// a Troupe graph, run on the same inputs, and compared, on the CPU and the fake device.
#include <catch2/catch.hpp>

#include "keras_reference.hpp"

using troupe::test::check_against_keras;

TEST_CASE("Arithmetic, comparisons, where and clip agree with Keras", "[ops][keras]") {
  check_against_keras("ops_arith");
}

TEST_CASE("Element-wise functions and softmax over an axis agree with Keras", "[ops][keras]") {
  check_against_keras("ops_maps");
}

TEST_CASE("Reductions agree with Keras", "[ops][keras]") {
  check_against_keras("ops_reduce");
}

TEST_CASE("Shape operations, joins and splits agree with Keras", "[ops][keras]") {
  check_against_keras("ops_shapes");
}

TEST_CASE("Indexing and take agree with Keras", "[ops][keras]") {
  check_against_keras("ops_index");
}

TEST_CASE("matmul and einsum agree with Keras", "[ops][keras]") {
  check_against_keras("ops_products");
}

TEST_CASE("cast and one_hot agree with Keras", "[ops][keras]") {
  check_against_keras("ops_types");
}
