#include <catch2/catch.hpp>

#include "core/tensor.hpp"

using namespace troupe::core;

TEST_CASE("Shape counts elements and rows", "[tensor]") {
  Shape s{4, 3, 2};
  CHECK(s.rank() == 3);
  CHECK(s.num_elements() == 24);
  CHECK(s.row_size() == 6);
  CHECK(s.to_string() == "[4, 3, 2]");
  CHECK(Shape{}.num_elements() == 1);
  CHECK(Shape{0, 5}.num_elements() == 0);
  CHECK(s == Shape(std::vector<int64_t>{4, 3, 2}));
  CHECK(s != Shape{4, 6});
}

TEST_CASE("Views share storage and slice rows without copying", "[tensor]") {
  Tensor t(Shape{3, 2}, std::vector<float>{0, 1, 2, 3, 4, 5});
  TensorView v = t.view();
  auto r = v.rows(1, 3);
  CHECK(r.shape() == (Shape{2, 2}));
  CHECK(r.data() == t.data() + 2);
  r[0] = 42.0f;
  CHECK(t[2] == 42.0f);
  auto flat = v.reshaped(Shape{6});
  CHECK(flat.data() == t.data());
  CHECK(t.matrix()(2, 1) == 5.0f);
}

TEST_CASE("Tensor resize keeps the allocation when it shrinks", "[tensor]") {
  Tensor t(Shape{8, 8});
  const float* before = t.data();
  t.resize(Shape{4, 8});
  CHECK(t.data() == before);
  CHECK(t.size() == 32);
  t.resize(Shape{8, 8});
  CHECK(t.data() == before);
}

TEST_CASE("copy and max_abs_diff", "[tensor]") {
  Tensor a(Shape{2, 2}, std::vector<float>{1, 2, 3, 4});
  Tensor b(Shape{2, 2});
  copy(a, b);
  CHECK(max_abs_diff(a, b) == 0.0f);
  b[3] = 1.5f;
  CHECK(max_abs_diff(a, b) == Approx(2.5f));
}
