// Dense layers on cuBLASLt. Row-major [rows, cols] buffers are column-major [cols, rows]
// ones, so with X [n, in], W [in, out], Y [n, out] (all row-major):
//   forward   Y^T  (out x n)  = W^T (out x in) . X^T (in x n)       + bias, in the epilogue
//   dW        dW^T (out x in) = dY^T (out x n) . (X^T)^T (n x in)
//   dX        dX^T (in x n)   = (W^T)^T (in x out) . dY^T (out x n)
// and the bias' gradient is dY's column sums (gpu/kernels). Operands are converted to the
// policy's 16-bit type in scratch under the mixed policies; accumulation and outputs are
// float32. The algorithm for each shape is chosen once by cuBLASLt's heuristic and kept.
#include <cstring>
#include <tuple>

#include "gpu/cuda_backend.hpp"
#include "gpu/cuda_internal.hpp"
#include "gpu/kernels/launch.hpp"

namespace troupe::gpu {

namespace {

cudaDataType_t operand_type(core::Precision p) {
  switch (p) {
    case core::Precision::mixed_bfloat16:
      return CUDA_R_16BF;
    case core::Precision::mixed_float16:
      return CUDA_R_16F;
    default:
      return CUDA_R_32F;
  }
}

}  // namespace

const void* CudaBackend::operand(const float* x, int64_t n, core::Precision p, int slot) {
  if (p != core::Precision::mixed_bfloat16 && p != core::Precision::mixed_float16) return x;
  auto* half = static_cast<uint16_t*>(scratch(slot, static_cast<size_t>(n) * 2));
  const int t = p == core::Precision::mixed_bfloat16 ? 1 : 2;
  if (failed(launch::to_half(stream_, x, half, n, t), "to_half", __FILE__, __LINE__)) return x;
  return half;
}

void CudaBackend::gemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k,
                       const float* a, int64_t lda, const float* b, int64_t ldb, float* c,
                       int64_t ldc, const float* bias, core::Precision p) {
  if (broken() || m == 0 || n == 0) return;
  if (!gemms_) {
    gemms_ = std::make_unique<GemmCache>();
    TROUPE_GPU_TRY(cudaMalloc(&gemms_->workspace, kWorkspaceBytes));
  }
  const GemmCache::Key key{transpose_a,     transpose_b,        m, n, k, lda, ldb, ldc,
                           bias != nullptr, static_cast<int>(p)};
  auto found = gemms_->entries.find(key);
  if (found == gemms_->entries.end()) {
    GemmCache::Entry e;
    const cublasComputeType_t compute =
        p == core::Precision::tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    TROUPE_GPU_TRY(cublasLtMatmulDescCreate(&e.op, compute, CUDA_R_32F));
    const cublasOperation_t ta = transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t tb = transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    TROUPE_GPU_TRY(
        cublasLtMatmulDescSetAttribute(e.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    TROUPE_GPU_TRY(
        cublasLtMatmulDescSetAttribute(e.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    if (bias != nullptr) {
      const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
      const cudaDataType_t bias_type = CUDA_R_32F;
      TROUPE_GPU_TRY(cublasLtMatmulDescSetAttribute(e.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                                    sizeof epilogue));
      TROUPE_GPU_TRY(cublasLtMatmulDescSetAttribute(e.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                                    &bias_type, sizeof bias_type));
      e.has_bias = true;
    }
    const cudaDataType_t in = operand_type(p);
    // The stored matrices: op(A) is m x k, so A is (transposed ? k x m : m x k).
    TROUPE_GPU_TRY(
        cublasLtMatrixLayoutCreate(&e.a, in, transpose_a ? k : m, transpose_a ? m : k, lda));
    TROUPE_GPU_TRY(
        cublasLtMatrixLayoutCreate(&e.b, in, transpose_b ? n : k, transpose_b ? k : n, ldb));
    TROUPE_GPU_TRY(cublasLtMatrixLayoutCreate(&e.c, CUDA_R_32F, m, n, ldc));
    cublasLtMatmulPreference_t pref = nullptr;
    TROUPE_GPU_TRY(cublasLtMatmulPreferenceCreate(&pref));
    const size_t ws = kWorkspaceBytes;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                         sizeof ws);
    cublasLtMatmulHeuristicResult_t result{};
    int found_algos = 0;
    const cublasStatus_t h = cublasLtMatmulAlgoGetHeuristic(lt_, e.op, e.a, e.b, e.c, e.c, pref, 1,
                                                            &result, &found_algos);
    cublasLtMatmulPreferenceDestroy(pref);
    if (h != CUBLAS_STATUS_SUCCESS || found_algos == 0) {
      cublasLtMatrixLayoutDestroy(e.a);
      cublasLtMatrixLayoutDestroy(e.b);
      cublasLtMatrixLayoutDestroy(e.c);
      cublasLtMatmulDescDestroy(e.op);
      if (p == core::Precision::mixed_bfloat16 || p == core::Precision::mixed_float16) {
        // No 16-bit kernel for this shape (a leading dimension that is not a multiple of
        // 8, say): the same product in float32 on operands rounded as the type holds them.
        const int t = p == core::Precision::mixed_bfloat16 ? 1 : 2;
        const int64_t na = (transpose_a ? m : k) * lda, nb = (transpose_b ? k : n) * ldb;
        auto* ra = static_cast<float*>(scratch(10, static_cast<size_t>(na) * 4));
        auto* rb = static_cast<float*>(scratch(11, static_cast<size_t>(nb) * 4));
        TROUPE_GPU_TRY(launch::round_values(stream_, a, ra, na, t));
        TROUPE_GPU_TRY(launch::round_values(stream_, b, rb, nb, t));
        gemm(transpose_a, transpose_b, m, n, k, ra, lda, rb, ldb, c, ldc, bias,
             core::Precision::float32);
        return;
      }
      (void)failed(h == CUBLAS_STATUS_SUCCESS ? CUBLAS_STATUS_NOT_SUPPORTED : h,
                   "cublasLtMatmulAlgoGetHeuristic", __FILE__, __LINE__);
      return;
    }
    e.algo = result.algo;
    found = gemms_->entries.emplace(key, e).first;
  }
  const auto& e = found->second;
  if (e.has_bias)
    TROUPE_GPU_TRY(cublasLtMatmulDescSetAttribute(e.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                                  sizeof bias));
  const float alpha = 1.0f, beta = 0.0f;
  const void* ao = operand(a, (transpose_a ? m : k) * lda, p, 0);
  const void* bo = operand(b, (transpose_b ? k : n) * ldb, p, 1);
  TROUPE_GPU_TRY(cublasLtMatmul(lt_, e.op, &alpha, ao, e.a, bo, e.b, &beta, c, e.c, c, e.c, &e.algo,
                                gemms_->workspace, kWorkspaceBytes, stream_));
}

void CudaBackend::dense_forward(core::ConstTensorView x, core::ConstTensorView w,
                                core::ConstTensorView b, core::TensorView y, core::Precision p) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  set_device();
  const int64_t n = x.shape()[0], in = w.shape()[0], out = w.shape()[1];
  gemm(false, false, out, n, in, w.data(), out, x.data(), in, y.data(), out, b.data(), p);
}

void CudaBackend::dense_backward(core::ConstTensorView x, core::ConstTensorView w,
                                 core::ConstTensorView dy, core::TensorView dw, core::TensorView db,
                                 core::TensorView dx, core::Precision p) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  set_device();
  const int64_t n = x.shape()[0], in = w.shape()[0], out = w.shape()[1];
  gemm(false, true, out, in, n, dy.data(), out, x.data(), in, dw.data(), out, nullptr, p);
  TROUPE_GPU_TRY(launch::column_sum(stream_, dy.data(), nullptr, db.data(), n, out));
  if (!dx.empty())
    gemm(true, false, in, n, out, w.data(), out, dy.data(), out, dx.data(), in, nullptr, p);
}

}  // namespace troupe::gpu
