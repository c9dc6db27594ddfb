// The CPU's matrix products on oneDNN (core/cpu/gemm.hpp) and its bfloat16 path: products
// against a double-precision reference, mixed_bfloat16's bf16 kernels against the rounding
// reference they replace (same rounded operands, float32 accumulation) and against float32,
// and the refusal of mixed_bfloat16 on a CPU without AVX512_BF16, simulated by the
// dispatch's mask.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>

#include "core/backend.hpp"
#include "core/cpu/gemm.hpp"
#include "core/cpu_features.hpp"
#include "core/half.hpp"
#include "core/layer_ops.hpp"
#include "core/parallel.hpp"
#include "helpers.hpp"

using namespace troupe::core;
using troupe::test::random_tensor;

namespace {

// Masks CPU features for one scope, as TROUPE_CPU_DISABLE does.
struct Masked {
  explicit Masked(const std::string& list) { REQUIRE(set_cpu_disable(list).ok()); }
  ~Masked() { (void)set_cpu_disable(""); }
};

// op(a)[m,k] op(b)[k,n] in double from row-major storage.
std::vector<double> product(const Tensor& a, bool ta, const Tensor& b, bool tb, int64_t m,
                            int64_t n, int64_t k) {
  std::vector<double> c(static_cast<size_t>(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0.0;
      for (int64_t l = 0; l < k; ++l)
        s += static_cast<double>(ta ? a[l * m + i] : a[i * k + l]) *
             (tb ? b[j * k + l] : b[l * n + j]);
      c[static_cast<size_t>(i * n + j)] = s;
    }
  return c;
}

// Runs `fn` once with the CPU as it is and once with AVX512_BF16 masked (the rounding
// reference), returning both results.
template <class Fn>
std::pair<std::vector<Tensor>, std::vector<Tensor>> fast_and_reference(Fn fn) {
  auto fast = fn();
  Masked m("avx512_bf16");
  return {fast, fn()};
}

}  // namespace

TEST_CASE("CPU features come from CPUID and a mask hides them, as on an older CPU",
          "[cpu_kernels]") {
  const bool had = cpu_has(CpuFeature::avx512_bf16);
  {
    Masked m("avx512_bf16,f16c");
    CHECK_FALSE(cpu_has(CpuFeature::avx512_bf16));
    CHECK_FALSE(cpu_has(CpuFeature::f16c));
    CHECK(cpu_masked(CpuFeature::avx512_bf16) == had);
    for (const auto& name : cpu_feature_names())
      CHECK((name != "avx512_bf16" && name != "f16c"));
    CHECK_FALSE(cpu::gemm_supports(DType::bfloat16));
    CHECK(cpu::gemm_engine(DType::bfloat16).empty());
    // auto takes float32, and mixed_bfloat16 is refused, naming the instruction set.
    CHECK(resolve_precision("auto", cpu_backend()).value() == Precision::float32);
    auto refused = resolve_precision("mixed_bfloat16", cpu_backend());
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.error().code == Errc::invalid_argument);
    CHECK_THAT(refused.error().message,
               Catch::Contains("AVX512_BF16") &&
                   Catch::Contains(had ? "TROUPE_CPU_DISABLE masks" : "lacks"));
    CHECK(resolve_precision("float32", cpu_backend()).value() == Precision::float32);
  }
  CHECK(cpu_has(CpuFeature::avx512_bf16) == had);
  auto bad = set_cpu_disable("avx512_bf16,avx9000");
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.error().message, Catch::Contains("'avx9000'") && Catch::Contains("avx512_bf16"));
  CHECK(cpu_has(CpuFeature::avx512_bf16) == had);  // a bad list changes nothing
  auto tf32 = resolve_precision("tf32", cpu_backend());
  REQUIRE_FALSE(tf32.ok());
  CHECK_THAT(tf32.error().message, Catch::Contains("tf32"));
}

TEST_CASE("auto takes mixed_bfloat16 exactly where the CPU's bf16 products are fast",
          "[cpu_kernels]") {
  const bool fast_bf16 = cpu::gemm_supports(DType::bfloat16);
  CHECK(cpu_backend().fast(Precision::mixed_bfloat16) == fast_bf16);
  CHECK(resolve_precision("auto", cpu_backend()).value() ==
        (fast_bf16 ? Precision::mixed_bfloat16 : Precision::float32));
  if (!cpu::gemm_supports(DType::float32)) {
    WARN("built without oneDNN: Eigen computes every product");
    return;
  }
  if (!cpu_has(CpuFeature::avx512_bf16)) WARN("no AVX512_BF16 on this CPU");
}

TEST_CASE("oneDNN products match a double reference, transposed, accumulated, with a bias",
          "[cpu_kernels]") {
  if (!cpu::gemm_supports(DType::float32)) {
    WARN("built without oneDNN: nothing to compare");
    return;
  }
  // k = 1 is an outer product, which gemm() computes itself (not oneDNN).
  const int64_t m = 37, n = 23;
  for (int64_t k : {int64_t{130}, int64_t{1}})
    for (int threads : {1, 2}) {
      set_intra_op_threads(threads);
      for (bool ta : {false, true})
        for (bool tb : {false, true})
          for (bool relu : {false, true}) {
            INFO("k " << k << " threads " << threads << " ta " << ta << " tb " << tb << " relu "
                      << relu);
            const Tensor a = random_tensor(ta ? Shape{k, m} : Shape{m, k}, 1);
            const Tensor b = random_tensor(tb ? Shape{n, k} : Shape{k, n}, 2);
            const Tensor bias = random_tensor(Shape{n}, 3);
            Tensor c = random_tensor(Shape{m, n}, 4);
            const Tensor before = c;
            cpu::Gemm g;
            g.m = m;
            g.n = n;
            g.k = k;
            g.a = {a.data(), ta ? m : k, ta};
            g.b = {b.data(), tb ? k : n, tb};
            g.c = c.data();
            g.ldc = n;
            g.bias = bias.data();
            g.accumulate = true;
            g.relu = relu;
            REQUIRE(cpu::gemm(g));
            const auto want = product(a, ta, b, tb, m, n, k);
            double worst = 0.0;
            int64_t clipped = 0;
            for (int64_t i = 0; i < m * n; ++i) {
              double v = want[static_cast<size_t>(i)] + bias[i % n] + before[i];
              if (relu && v < 0.0) {
                v = 0.0;
                ++clipped;
              }
              worst = std::max(worst, std::fabs(c[i] - v));
            }
            CHECK(worst < 2e-5 * static_cast<double>(k + 1));
            if (relu) CHECK(clipped > 0);  // the check saw the ReLU act
          }
    }
  set_intra_op_threads(1);
  CHECK_THAT(cpu::gemm_engine(DType::float32), Catch::StartsWith("onednn:"));
}

TEST_CASE("mixed_bfloat16's bf16 kernels compute what the rounding reference does",
          "[cpu_kernels]") {
  if (!cpu::gemm_supports(DType::bfloat16)) {
    WARN("no bf16 products here (no oneDNN or no AVX512_BF16): nothing to compare");
    return;
  }
  SECTION("a Dense product, forward and backward") {
    const Tensor x = random_tensor(Shape{64, 300}, 5), dy = random_tensor(Shape{64, 50}, 6);
    const Tensor w = random_tensor(Shape{300, 50}, 1, -0.13f, 0.13f), b(Shape{50});
    auto run = [&](Precision p) {
      Tensor y(Shape{64, 50}), dx(x.shape()), dw(w.shape()), db(b.shape());
      cpu_backend().dense_forward(x, w, b, y, p);
      cpu_backend().dense_backward(x, w, dy, dw, db, dx, p);
      return std::vector<Tensor>{y, dx, dw, db};
    };
    auto [fast, ref] = fast_and_reference([&] { return run(Precision::mixed_bfloat16); });
    const auto f32 = run(Precision::float32);
    for (size_t i = 0; i < fast.size(); ++i) {
      INFO("output " << i << " (y, dx, dw, db)");
      // The same bf16-rounded operands, summed in float32 in another order: 300 (or 64)
      // products of magnitude < 1 differ by a few float32 ulps of the sum.
      CHECK(max_abs_diff(fast[i], ref[i]) < 1e-4f);
      if (i < 3) CHECK(max_abs_diff(fast[i], f32[i]) > 1e-3f);  // and bf16 it was
    }
    CHECK(max_abs_diff(fast[3], f32[3]) < 1e-5f);  // the bias' gradient sums float32 dy
  }
  SECTION("a convolution, forward and backward") {
    const Tensor x = random_tensor(Shape{4, 12, 12, 3}, 7),
                 dy = random_tensor(Shape{4, 10, 10, 8}, 8);
    const Tensor w = random_tensor(Shape{3, 3, 3, 8}, 1, -0.25f, 0.25f), b(Shape{8});
    auto run = [&](Precision p) {
      Tensor y(dy.shape()), dx(x.shape()), dw(w.shape()), db(b.shape());
      std::unique_ptr<Workspace> ws;
      cpu_backend().conv2d_forward(Conv2dGeometry{}, x, w, b, y, ws, p);
      cpu_backend().conv2d_backward(Conv2dGeometry{}, x, w, dy, dw, db, dx, ws, p);
      return std::vector<Tensor>{y, dx, dw};
    };
    auto [fast, ref] = fast_and_reference([&] { return run(Precision::mixed_bfloat16); });
    const auto f32 = run(Precision::float32);
    for (size_t i = 0; i < fast.size(); ++i) {
      INFO("output " << i << " (y, dx, dw)");
      CHECK(max_abs_diff(fast[i], ref[i]) < 1e-4f);
      CHECK(max_abs_diff(fast[i], f32[i]) > 1e-4f);
    }
  }
}

TEST_CASE("bf16 operands convert as to_half does, subnormals aside", "[cpu_kernels]") {
  std::vector<float> v(1000);
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = std::ldexp(static_cast<float>(i) - 500.3f, static_cast<int>(i % 60) - 30);
  v[3] = std::numeric_limits<float>::infinity();
  v[4] = -0.0f;
  std::vector<uint16_t> ours(v.size()), theirs(v.size());
  for (size_t n : {size_t{1000}, size_t{997}, size_t{5}}) {  // whole vectors and masked tails
    to_bf16_fast(v.data(), ours.data(), n);
    to_half(v.data(), theirs.data(), n, DType::bfloat16);
    CHECK(std::equal(ours.begin(), ours.begin() + static_cast<long>(n), theirs.begin()));
  }
  const float tiny = std::numeric_limits<float>::denorm_min() * 1000;
  uint16_t h = 0xffff;
  to_bf16_fast(&tiny, &h, 1);
  if (cpu_has(CpuFeature::avx512_bf16))
    CHECK(h == 0);  // the instruction flushes subnormal inputs
  else
    CHECK(h == float_to_bf16(tiny));
}

TEST_CASE("a backward pass reads the operands of its own forward pass, never an older one's",
          "[cpu_kernels]") {
  // The bf16 copies of a layer's input and kernel are made by its forward pass and reused by
  // its backward; here the kernel and the input change in place between two steps, as an
  // optimizer and the next batch change them, and the second step must see the new values.
  const Tensor x1 = random_tensor(Shape{32, 40}, 9), x2 = random_tensor(Shape{32, 40}, 10);
  const Tensor dy = random_tensor(Shape{32, 20}, 11);
  auto& be = cpu_backend();
  const Precision p = Precision::mixed_bfloat16;
  Tensor w = random_tensor(Shape{40, 20}, 1, -0.3f, 0.3f);
  const Tensor b(Shape{20});
  Tensor y(Shape{32, 20}), dw(w.shape()), db(b.shape()), dx(Shape{32, 40});
  Tensor input = x1;
  be.dense_forward(input, w, b, y, p);
  be.dense_backward(input, w, dy, dw, db, dx, p);
  for (int64_t i = 0; i < w.size(); ++i)
    w[i] += 0.5f;
  std::copy_n(x2.data(), x2.size(), input.data());  // the same memory, a new batch
  be.dense_forward(input, w, b, y, p);
  be.dense_backward(input, w, dy, dw, db, dx, p);

  const Tensor fresh_w = w;  // the same values elsewhere: nothing cached for them
  Tensor fy(y.shape()), fdw(w.shape()), fdb(b.shape()), fdx(dx.shape());
  be.dense_forward(x2, fresh_w, b, fy, p);
  be.dense_backward(x2, fresh_w, dy, fdw, fdb, fdx, p);
  CHECK(max_abs_diff(fdx, dx) == 0.0f);
  CHECK(max_abs_diff(fdw, dw) == 0.0f);
}
