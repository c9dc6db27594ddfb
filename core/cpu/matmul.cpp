// The CPU's matrix products: Dense (and Conv2D's, one product over im2col patches in
// core/cpu/conv_pool.cpp), forward and backward, split over the intra-op threads. On
// oneDNN (core/cpu/gemm.hpp) where the build has it: float32, and mixed_bfloat16 as
// bfloat16 operands with float32 accumulation where the CPU has AVX512_BF16; otherwise
// Eigen, the low-precision policies as its rounding reference.
#include <algorithm>
#include <atomic>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "core/cpu/cpu_backend.hpp"
#include "core/cpu/gemm.hpp"
#include "core/half.hpp"
#include "core/parallel.hpp"

namespace troupe::core {

namespace {

// Below these, a matrix product stays on one thread: splitting costs more than it saves.
constexpr int64_t kRowGrain = 32;
constexpr int64_t kColumnGrain = 32;

// Rounded operands of the low-precision policies (unused under float32). One set per
// thread: steps of several models may run on different threads.
struct Operands {
  Tensor x, w, dy;
};
Operands& operands() {
  thread_local Operands o;
  return o;
}

std::atomic<uint64_t> product_flops{0};

void count(int64_t m, int64_t n, int64_t k) {
  product_flops.fetch_add(static_cast<uint64_t>(2 * m * n * k), std::memory_order_relaxed);
}

// The type the fast path multiplies policy p's operands in, if it can here.
std::optional<DType> fast_type(Precision p) {
  if (p == Precision::float32 && cpu::gemm_supports(DType::float32)) return DType::float32;
  if (p == Precision::mixed_bfloat16 && cpu::gemm_supports(DType::bfloat16)) return DType::bfloat16;
  return std::nullopt;
}

// bfloat16 copies of a forward pass's operands, by address, for the backward pass that
// follows it (per thread, as Operands): a layer's input and kernel stay unchanged from its
// forward to its backward (the float32 backward reads them too), and every forward
// converts afresh, so a copy is never older than the last forward that read that memory.
// A backward that finds no copy (evicted, or another thread's) converts anew.
class Converted {
 public:
  // Forward: converts v now.
  const uint16_t* fresh(const float* v, int64_t n) {
    Entry& e = slot(v, n);
    e.bits.resize(static_cast<size_t>(n));
    to_bf16_fast(v, e.bits.data(), e.bits.size());
    e.valid = true;
    return e.bits.data();
  }
  // Backward: the forward's copy of v, or one converted now.
  const uint16_t* get(const float* v, int64_t n) {
    Entry& e = slot(v, n);
    return e.valid ? e.bits.data() : fresh(v, n);
  }

 private:
  struct Entry {
    const float* v = nullptr;
    int64_t n = 0;
    bool valid = false;
    uint64_t used = 0;
    std::vector<uint16_t> bits;
  };
  static constexpr size_t capacity = 16;  // the inputs and kernels of 8 layers

  Entry& slot(const float* v, int64_t n) {
    ++clock_;
    Entry* oldest = nullptr;
    for (Entry& e : entries_) {
      if (e.v == v && e.n == n) {
        e.used = clock_;
        return e;
      }
      if (oldest == nullptr || e.used < oldest->used) oldest = &e;
    }
    if (entries_.size() < capacity) oldest = &entries_.emplace_back();
    *oldest = Entry{v, n, false, clock_, std::move(oldest->bits)};
    return *oldest;
  }

  std::vector<Entry> entries_;
  uint64_t clock_ = 0;
};

Converted& converted() {
  thread_local Converted c;
  return c;
}

enum class Pass { forward, backward };

// `v` (stored row-major, `ld` elements a row) as a product of type t reads it: the values
// themselves, or their bfloat16 copy (made now in the forward pass, reused in the backward).
cpu::GemmOperand operand(const float* v, int64_t size, int64_t ld, bool transposed, DType t,
                         Pass pass) {
  if (t == DType::float32) return {v, ld, transposed};
  auto& c = converted();
  return {pass == Pass::forward ? c.fresh(v, size) : c.get(v, size), ld, transposed};
}
cpu::GemmOperand operand(ConstTensorView v, int64_t ld, bool transposed, DType t, Pass pass) {
  return operand(v.data(), v.size(), ld, transposed, t, pass);
}

// Per-thread room for a backward pass's bfloat16 gradient (new in every backward pass).
uint16_t* gradient_scratch(int64_t n) {
  thread_local std::vector<uint16_t> scratch;
  scratch.resize(static_cast<size_t>(n));
  return scratch.data();
}

// dy in type t: converted into the scratch.
cpu::GemmOperand gradient(ConstTensorView dy, int64_t ld, DType t) {
  if (t == DType::float32) return {dy.data(), ld, false};
  uint16_t* bits = gradient_scratch(dy.size());
  to_bf16_fast(dy.data(), bits, static_cast<size_t>(dy.size()));
  return {bits, ld, false};
}

// y[m, n] = a[m, k] b[k, n] (+ bias) (then max(y, 0) with relu), a and b as stored or
// transposed, on the fast path.
bool fast_product(DType t, int64_t m, int64_t n, int64_t k, cpu::GemmOperand a, cpu::GemmOperand b,
                  float* y, const float* bias, bool relu = false) {
  cpu::Gemm g;
  g.m = m;
  g.n = n;
  g.k = k;
  g.a = a;
  g.b = b;
  g.c = y;
  g.ldc = n;
  g.bias = bias;
  g.relu = relu;
  g.type = t;
  return cpu::gemm(g);
}

// A dense layer's two backward products on the fast path, with its output gradient `g`
// already in type t: dw = x^T g, dx = g w^T (not when dx is empty).
bool fast_dense_backward(DType t, ConstTensorView x_in, ConstTensorView w_in, cpu::GemmOperand g,
                         TensorView dw, TensorView dx) {
  const int64_t n = x_in.shape()[0], in = w_in.shape()[0], out = w_in.shape()[1];
  return fast_product(t, in, out, n, operand(x_in, in, true, t, Pass::backward), g, dw.data(),
                      nullptr) &&
         (dx.empty() || fast_product(t, n, in, out, g, operand(w_in, out, true, t, Pass::backward),
                                     dx.data(), nullptr));
}

// The ReLU's gradient for the product below it, in one pass over dy and y: dz = dy where
// y > 0, else 0, written as float32 (`dz32`) or bfloat16 bits (`dz16`), and db = its column
// sums. Rows are split over the intra-op threads; each chunk sums its own rows and the
// chunks are added in row order, so the sums do not depend on timing.
void relu_gradient(ConstTensorView y, ConstTensorView dy, float* dz32, uint16_t* dz16,
                   TensorView db) {
  const int64_t rows = y.shape()[0], cols = y.shape()[1];
  // Rows [r0, r1) into sums s (cols floats, zeroed by the caller).
  auto pass = [&](int64_t r0, int64_t r1, float* __restrict s) {
    thread_local std::vector<float> row;
    if (dz16 != nullptr) row.resize(static_cast<size_t>(cols));
    for (int64_t r = r0; r < r1; ++r) {
      const float* __restrict yr = y.data() + r * cols;
      const float* __restrict gr = dy.data() + r * cols;
      float* __restrict out = dz16 != nullptr ? row.data() : dz32 + r * cols;
      for (int64_t c = 0; c < cols; ++c) {
        const float v = yr[c] > 0.0f ? gr[c] : 0.0f;
        out[c] = v;
        s[c] += v;
      }
      if (dz16 != nullptr) to_bf16_fast(out, dz16 + r * cols, static_cast<size_t>(cols));
    }
  };
  std::fill_n(db.data(), cols, 0.0f);
  if (intra_op_threads() == 1 || rows < 2 * kRowGrain) return pass(0, rows, db.data());
  std::mutex mu;
  std::vector<std::pair<int64_t, std::vector<float>>> partial;
  parallel_for(rows, kRowGrain, [&](int64_t r0, int64_t r1) {
    std::vector<float> sums(static_cast<size_t>(cols), 0.0f);
    pass(r0, r1, sums.data());
    std::lock_guard<std::mutex> lock(mu);
    partial.emplace_back(r0, std::move(sums));
  });
  std::sort(partial.begin(), partial.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [r0, sums] : partial)
    for (int64_t c = 0; c < cols; ++c)
      db.data()[c] += sums[static_cast<size_t>(c)];
}

}  // namespace

uint64_t cpu_product_flops() {
  return product_flops.load(std::memory_order_relaxed);
}

void CpuBackend::dense_forward(ConstTensorView x_in, ConstTensorView w_in, ConstTensorView b,
                               TensorView y, Precision p) {
  const int64_t n = x_in.shape()[0], in = w_in.shape()[0], out = w_in.shape()[1];
  count(n, out, in);
  if (auto t = fast_type(p)) {
    if (fast_product(*t, n, out, in, operand(x_in, in, false, *t, Pass::forward),
                     operand(w_in, out, false, *t, Pass::forward), y.data(), b.data()))
      return;
  }
  auto& ops = operands();
  const ConstTensorView x = rounded_operand(x_in, p, ops.x);
  const ConstTensorView w = rounded_operand(w_in, p, ops.w);
  // Rows of the batch in parallel (intra-op threads; one chunk when there is one thread).
  parallel_for(x.shape()[0], kRowGrain, [&](int64_t r0, int64_t r1) {
    auto ym = y.matrix().middleRows(r0, r1 - r0);
    ym.noalias() = x.matrix().middleRows(r0, r1 - r0) * w.matrix();
    ym.rowwise() += Eigen::Map<const Eigen::RowVectorXf>(b.data(), b.size());
  });
}

void CpuBackend::dense_backward(ConstTensorView x_in, ConstTensorView w_in, ConstTensorView dy,
                                TensorView dw, TensorView db, TensorView dx, Precision p) {
  const int64_t n = x_in.shape()[0], in = w_in.shape()[0], out = w_in.shape()[1];
  count(in, out, n);
  if (!dx.empty()) count(n, in, out);
  if (auto t = fast_type(p)) {
    // dy is read by both products: converted once; x and w as the forward pass made them.
    if (fast_dense_backward(*t, x_in, w_in, gradient(dy, out, *t), dw, dx)) {
      Eigen::Map<Eigen::RowVectorXf>(db.data(), out) = dy.matrix().colwise().sum();
      return;
    }
  }
  auto& ops = operands();
  const ConstTensorView x = rounded_operand(x_in, p, ops.x);
  const ConstTensorView w = rounded_operand(w_in, p, ops.w);
  const auto g = rounded_operand(dy, p, ops.dy).matrix();
  const auto g32 = dy.matrix();  // the bias' gradient sums float32 values
  // The kernel's gradient sums over the batch: split it by output column instead.
  parallel_for(w.shape()[1], kColumnGrain, [&](int64_t c0, int64_t c1) {
    dw.matrix().middleCols(c0, c1 - c0).noalias() =
        x.matrix().transpose() * g.middleCols(c0, c1 - c0);
    Eigen::Map<Eigen::RowVectorXf>(db.data() + c0, c1 - c0) =
        g32.middleCols(c0, c1 - c0).colwise().sum();
  });
  if (dx.empty()) return;
  parallel_for(dy.shape()[0], kRowGrain, [&](int64_t r0, int64_t r1) {
    dx.matrix().middleRows(r0, r1 - r0).noalias() =
        g.middleRows(r0, r1 - r0) * w.matrix().transpose();
  });
}

void CpuBackend::dense_relu_forward(ConstTensorView x, ConstTensorView w, ConstTensorView b,
                                    TensorView y, Precision p) {
  const int64_t n = x.shape()[0], in = w.shape()[0], out = w.shape()[1];
  if (auto t = fast_type(p)) {
    // The ReLU as the product's post-op: y is written once.
    if (fast_product(*t, n, out, in, operand(x, in, false, *t, Pass::forward),
                     operand(w, out, false, *t, Pass::forward), y.data(), b.data(),
                     /*relu=*/true)) {
      count(n, out, in);
      return;
    }
  }
  dense_forward(x, w, b, y, p);
  relu_forward(y, y);
}

void CpuBackend::dense_relu_backward(ConstTensorView x, ConstTensorView w, ConstTensorView y,
                                     ConstTensorView dy, TensorView dz, TensorView dw,
                                     TensorView db, TensorView dx, Precision p) {
  const int64_t n = x.shape()[0], in = w.shape()[0], out = w.shape()[1];
  if (auto t = fast_type(p)) {
    // One pass makes the masked gradient in the products' type and the bias' gradient.
    uint16_t* bits = *t == DType::bfloat16 ? gradient_scratch(n * out) : nullptr;
    relu_gradient(y, dy, dz.data(), bits, db);
    const cpu::GemmOperand g = bits != nullptr ? cpu::GemmOperand{bits, out, false}
                                               : cpu::GemmOperand{dz.data(), out, false};
    if (fast_dense_backward(*t, x, w, g, dw, dx)) {
      count(in, out, n);
      if (!dx.empty()) count(n, in, out);
      return;
    }
  }
  relu_backward(y, dy, dz);
  dense_backward(x, w, dz, dw, db, dx, p);
}

}  // namespace troupe::core
