#include "core/cpu/gemm.hpp"

#include "core/cpu_features.hpp"

#include <atomic>

#if TROUPE_WITH_DNNL
#include <dlfcn.h>

#include <map>
#include <mutex>
#include <tuple>
#include <unordered_map>
#include <vector>

#include <dnnl.hpp>

#include "core/parallel.hpp"
#endif

namespace troupe::core::cpu {

#if TROUPE_WITH_DNNL

namespace {

using dt = dnnl::memory::data_type;

// One primitive per shape, layout and type, kept by the thread that made it (primitives
// are immutable and cheap to keep; a training step asks for the same few shapes again).
// oneDNN divides the work among the threads when it makes a primitive: their number is
// part of the key.
struct Key {
  int64_t m, n, k, lda, ldb, ldc;
  bool ta, tb, bias, accumulate, relu;
  DType type;
  int threads;
  bool operator<(const Key& o) const {
    return std::tie(m, n, k, lda, ldb, ldc, ta, tb, bias, accumulate, relu, type, threads) <
           std::tie(o.m, o.n, o.k, o.lda, o.ldb, o.ldc, o.ta, o.tb, o.bias, o.accumulate, o.relu,
                    o.type, o.threads);
  }
};

struct Entry {
  dnnl::matmul primitive;
  dnnl::memory::desc a, b, c, bias, scratch;
};

dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

// oneDNN's threads are an OpenMP team of the calling thread's size; the runtime is the one
// libdnnl was built with (libgomp), found in the process rather than linked a second time.
void use_threads(int threads) {
  using SetThreads = void (*)(int);
  static const auto set = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "omp_set_num_threads"));
  thread_local int current = 0;
  if (set != nullptr && threads != current) {
    set(threads);
    current = threads;
  }
}

std::mutex kernel_mutex;
std::string kernels[2];  // what oneDNN chose, float32 and bfloat16

dnnl::memory::desc operand(int64_t rows, int64_t cols, const GemmOperand& o, dt type) {
  return {
      {rows, cols}, type, o.transposed ? dnnl::memory::dims{1, o.ld} : dnnl::memory::dims{o.ld, 1}};
}

const Entry* entry_for(const Gemm& g, int threads) {
  thread_local std::map<Key, Entry> cache;
  const Key key{g.m,
                g.n,
                g.k,
                g.a.ld,
                g.b.ld,
                g.ldc,
                g.a.transposed,
                g.b.transposed,
                g.bias != nullptr,
                g.accumulate,
                g.relu,
                g.type,
                threads};
  if (auto it = cache.find(key); it != cache.end()) return &it->second;
  const dt type = g.type == DType::bfloat16 ? dt::bf16 : dt::f32;
  Entry e;
  e.a = operand(g.m, g.k, g.a, type);
  e.b = operand(g.k, g.n, g.b, type);
  e.c = dnnl::memory::desc({g.m, g.n}, dt::f32, dnnl::memory::dims{g.ldc, 1});
  if (g.bias != nullptr) e.bias = dnnl::memory::desc({1, g.n}, dt::f32, dnnl::memory::dims{g.n, 1});
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (g.accumulate || g.relu) {
    dnnl::post_ops ops;
    if (g.accumulate) ops.append_sum(1.0f);
    if (g.relu) ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
    attr.set_post_ops(ops);
  }
  try {
    const dnnl::matmul::desc desc = g.bias != nullptr ? dnnl::matmul::desc(e.a, e.b, e.bias, e.c)
                                                      : dnnl::matmul::desc(e.a, e.b, e.c);
    const dnnl::matmul::primitive_desc pd(desc, attr, engine());
    e.scratch = pd.scratchpad_desc();
    e.primitive = dnnl::matmul(pd);
    std::lock_guard<std::mutex> lock(kernel_mutex);
    kernels[g.type == DType::bfloat16] = pd.impl_info_str();
  } catch (const dnnl::error&) {
    return nullptr;
  }
  return &cache.emplace(key, std::move(e)).first->second;
}

// c = a b with k = 1 in float32: an outer product, one multiply-add an element. For the
// input gradient of a one-unit Dense layer at batch 1024 by 400 (dx = dy w^T; every CTR
// model ends in such a layer) a plain loop takes 41 us with hot caches, oneDNN's sgemm
// 74 us, and oneDNN's matmul took 0.22-0.39 ms a call inside a training step.
void outer_product(const Gemm& g) {
  const auto* a = static_cast<const float*>(g.a.data);
  const auto* b = static_cast<const float*>(g.b.data);
  const int64_t a_step = g.a.transposed ? 1 : g.a.ld, b_step = g.b.transposed ? g.b.ld : 1;
  parallel_for(g.m, 32, [&](int64_t r0, int64_t r1) {
    for (int64_t i = r0; i < r1; ++i) {
      const float ai = a[i * a_step];
      float* __restrict c = g.c + i * g.ldc;
      for (int64_t j = 0; j < g.n; ++j) {
        float v = ai * b[j * b_step];
        if (g.bias != nullptr) v += g.bias[j];
        if (g.accumulate) v += c[j];
        c[j] = g.relu && v < 0.0f ? 0.0f : v;  // NaN stays NaN, as oneDNN leaves it
      }
    }
  });
}

}  // namespace

namespace {
std::atomic<bool> enabled{true};
}  // namespace

bool gemm_supports(DType type) {
  if (!enabled.load(std::memory_order_relaxed)) return false;
  if (type == DType::float32) return true;
  return type == DType::bfloat16 && cpu_has(CpuFeature::avx512_bf16);
}

bool gemm(const Gemm& g) {
  if (!gemm_supports(g.type)) return false;
  if (g.m == 0 || g.n == 0) return true;
  if (g.k == 0) return false;  // oneDNN wants k > 0; the caller writes the bias (or zeros)
  if (g.k == 1 && g.type == DType::float32) {
    outer_product(g);
    return true;
  }
  const int threads = intra_op_threads();
  use_threads(threads);
  const Entry* e = entry_for(g, threads);
  if (e == nullptr) return false;
  thread_local dnnl::stream stream(engine());
  thread_local std::vector<char> scratch;
  if (scratch.size() < e->scratch.get_size()) scratch.resize(e->scratch.get_size());
  auto& eng = engine();
  std::unordered_map<int, dnnl::memory> args{
      {DNNL_ARG_SRC, dnnl::memory(e->a, eng, const_cast<void*>(g.a.data))},
      {DNNL_ARG_WEIGHTS, dnnl::memory(e->b, eng, const_cast<void*>(g.b.data))},
      {DNNL_ARG_DST, dnnl::memory(e->c, eng, g.c)},
      {DNNL_ARG_SCRATCHPAD, dnnl::memory(e->scratch, eng, scratch.data())}};
  if (g.bias != nullptr)
    args.emplace(DNNL_ARG_BIAS, dnnl::memory(e->bias, eng, const_cast<float*>(g.bias)));
  e->primitive.execute(stream, args);
  stream.wait();
  return true;
}

void set_gemm_enabled(bool on) {
  enabled = on;
}

std::string gemm_engine(DType type) {
  if (!gemm_supports(type)) return "";
  std::lock_guard<std::mutex> lock(kernel_mutex);
  const std::string& k = kernels[type == DType::bfloat16];
  return k.empty() ? "onednn" : "onednn:" + k;
}

#else  // no oneDNN: callers keep Eigen

bool gemm_supports(DType) {
  return false;
}
bool gemm(const Gemm&) {
  return false;
}
void set_gemm_enabled(bool) {}
std::string gemm_engine(DType) {
  return "";
}

#endif

}  // namespace troupe::core::cpu
